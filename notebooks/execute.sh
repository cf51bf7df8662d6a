#!/usr/bin/env bash
# The notebooks' sources are the Jupytext percent files NAME.py, paired with NAME.ipynb (which carries
# the outputs). This syncs each .ipynb's inputs from its .py (outputs kept), then executes it in place.
# Usage: bash notebooks/execute.sh [NAME.ipynb|NAME.py ...]   (default: all). Prints each run time.
# Widget state is not stored (the live widgets need a kernel anyway, and plotly's FigureWidget state
# would add megabytes per notebook); figures keep a PNG and widgets an HTML snapshot for static viewers.
# On a machine busy with other work, OMP_NUM_THREADS=1 avoids torch's threads fighting over cores.
set -euo pipefail
cd "$(dirname "$0")"
names=()
for a in "$@"; do b="$(basename "$a")"; names+=("${b%.*}"); done   # NAME, NAME.py or NAME.ipynb
set -- "${names[@]+"${names[@]}"}"
if [ "$#" -eq 0 ]; then
  for f in 0*.py; do set -- "$@" "${f%.py}"; done
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
for name in "$@"; do
  jupytext --quiet --sync "$name.py"
  start=$(date +%s)
  jupyter nbconvert --to notebook --execute --inplace \
    --ExecutePreprocessor.timeout=600 \
    --ExecutePreprocessor.kernel_name=python3 \
    --ExecutePreprocessor.store_widget_state=False \
    "$name.ipynb"
  echo "$name.ipynb: $(( $(date +%s) - start )) s"
done
