#!/usr/bin/env bash
# device call 3: the exactness files on CUDA after the test-isolation fix, then a short profile with the tiny pair
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false DYNATREE_TEST_DEVICE=cuda
date -u
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_target_cache.py tests/test_device_tree.py \
  tests/test_tree_attention.py tests/test_exactness.py 2>&1 | tee "$OUT/s3-tests.log" | tail -6
timeout 60 python3 scripts/gpu_profile.py --target tiny-llama --out "$OUT/prof-tiny" --methods ar,linear:k=4,dynatree:gpu \
  --tokens 48 2>&1 | grep -v USDT > "$OUT/prof-tiny.log"; echo "profile rc=${PIPESTATUS[0]}"; tail -5 "$OUT/prof-tiny.log"
date -u
