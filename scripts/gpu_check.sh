#!/usr/bin/env bash
# One device check of dynatree (exactness on the device, fp16/bf16, benchmark), about 8 minutes on
# one GPU; nothing downloaded, the package need not be installed. Writes gpu_check.json,
# gpu_check.txt and bench.json to --out (default results/gpu_check/). Exit 1 only if exactness failed.
#   bash scripts/gpu_check.sh --out "$OUT"                         # GPU
#   bash scripts/gpu_check.sh --device cpu --quick --out /tmp/gc    # CPU, a few minutes
#   bash scripts/gpu_check.sh --sections bench,fastpath --runtimes eager,graphs,compiled --budget-s 570 \
#       --limit-bench 420 --out "$OUT"    # the three runtimes side by side, compile seconds apart (GPU)
# Options: python scripts/gpu_check.py --help
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
cd "$root"
exec "${PYTHON:-python3}" scripts/gpu_check.py "$@"
