#!/usr/bin/env bash
# Run the notebooks with other parameters through papermill (their first code cell is tagged
# "parameters"), writing executed copies elsewhere; the committed notebooks are not touched.
# Usage: bash notebooks/variant.sh OUT_DIR [PAIR]   e.g. bash notebooks/variant.sh /tmp/nb tiny-llama
# PAIR=tiny-llama: a tiny random pair (ModelPair.named) (seconds per notebook; for development).
set -euo pipefail
out="$(realpath -m "${1:?usage: bash notebooks/variant.sh OUT_DIR [PAIR]}")"
pair="${2:-tiny-llama}"
cd "$(dirname "$0")"
mkdir -p "$out"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
for f in 0*.py; do
  name="${f%.py}"
  jupytext --quiet --sync "$f"
  papermill --no-progress-bar --log-level WARNING -p PAIR "$pair" "$name.ipynb" "$out/$name.ipynb"
  echo "$out/$name.ipynb"
done
