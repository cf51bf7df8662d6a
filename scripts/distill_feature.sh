#!/usr/bin/env bash
# Train the feature draft on this project's 2-core CPU in at most 90 minutes: one `dynatree distill
# --kind feature` command (the recipe of the draft shipped until 2026-11-27; the one shipped since was
# trained on an H100, and `bash scripts/distill_gpu.sh` is that recipe for a GPU session).
#   data (<= 35% of the time limit): greedy target continuations of the bundled prompts, of 750
#         generated prompts and of 384 training-text passages (bf16 writer), plus the training text;
#   features: the target (bf16) reads every sequence once, its final hidden states and greedy
#         tokens are stored;
#   train: the feature draft, warm-started from the shipped independent draft (its two layers, norm
#         and head; the feature input starts at zero), unrolled 3 steps, until the time limit (cosine
#         schedule over the wall-clock budget), then export.
# Needs ../shared/data (or DATA_DIR=...). On a GPU add --device cuda and raise the sizes.
#
#   bash scripts/distill_feature.sh        # then: dynatree distill --kind feature --eval-only
set -euo pipefail
cd "$(dirname "$0")/.."
DATA_DIR=${DATA_DIR:-../shared/data}
WORK=${WORK:-.distill/feature}
OUT=${OUT:-.distill/feature/draft}
dynatree distill --kind feature --device cpu --threads 2 --data-dir "$DATA_DIR" --work-dir "$WORK" --out-dir "$OUT" \
  --time-limit ${TIME_LIMIT:-5400} --data-share 0.35 --export-reserve 60 \
  --samples-per-prompt 0 --gen-new-tokens 96 --gen-batch 256 --prompt-bank 600 --text-prompts 150 --bank-samples 0 \
  --bank-new-tokens 80 --passages 384 --passage-new-tokens 96 --passage-min 32 --passage-max 256 \
  --teacher-dtype bfloat16 --feature-text-tokens 400000 --max-len 384 \
  --init-from dynatree_core/assets/smollm2-135m-draft \
  --batch-tokens 4096 --micro-tokens 4096 --lr 5e-4 --warm-lr-frac 0.1 --reg-weight 0.1 --warmup 10 --steps 100000 --unroll 3 --log-every 25 --val-rows 64
