#!/usr/bin/env bash
# Regenerate the notebooks from _build.py and execute them in place, so the committed notebooks
# carry their outputs. Usage: bash notebooks/execute.sh [NOTEBOOK.ipynb ...]   (default: all)
# Widget state is not stored (the live widgets need a kernel anyway, and plotly's FigureWidget
# state would add megabytes per notebook). Prints each notebook's run time.
# On a machine busy with other work, OMP_NUM_THREADS=1 avoids torch's threads fighting over cores.
set -euo pipefail
cd "$(dirname "$0")"
names=()
for a in "$@"; do names+=("$(basename "$a")"); done   # accept notebooks/NAME.ipynb or NAME.ipynb
set -- "${names[@]+"${names[@]}"}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  python _build.py "$@" > /dev/null
fi
if [ "$#" -eq 0 ]; then
  set -- 0*.ipynb
fi
for nb in "$@"; do
  start=$(date +%s)
  jupyter nbconvert --to notebook --execute --inplace \
    --ExecutePreprocessor.timeout=600 \
    --ExecutePreprocessor.kernel_name=python3 \
    --ExecutePreprocessor.store_widget_state=False \
    "$nb"
  echo "$nb: $(( $(date +%s) - start )) s"
done
