#!/usr/bin/env bash
# Rebuild the shipped default draft (dynatree_core/assets/smollm2-135m-draft) from scratch.
# Needs one CUDA GPU (it was made on one H200 in about 13 minutes of wall time) and, beside the repo,
# ../shared/data (or pass DATA_DIR=...). Both phases are seeded; with --time-limit the cosine
# schedule is compressed into the steps that fit, so a slower or faster GPU gives a draft of the
# same recipe but not bit-identical weights (the exported metadata records the steps done).
#
#   bash scripts/distill_default.sh            # then: dynatree distill --eval-only
set -euo pipefail
cd "$(dirname "$0")/.."
DATA_DIR=${DATA_DIR:-../shared/data}
WORK=${WORK:-.distill}
OUT=${OUT:-dynatree_core/assets/smollm2-135m-draft}

# Phase 1: 6.8M tokens of target continuations (bundled prompts, greedy + 7 samples each, and
# 16,384 training-text passages) plus the training text itself; 2-layer student from the target.
dynatree distill --device cuda --data-dir "$DATA_DIR" --work-dir "$WORK/base" --out-dir "$WORK/base/draft" \
  --time-limit 530 --threads 8 --steps 8000

# Phase 2: fine-tune on continuations of 7,500 generated prompts (templates x 377 topics from
# data/distill_topics.txt, questions about training-text excerpts), kept short like real answers.
dynatree distill --device cuda --data-dir "$DATA_DIR" --work-dir "$WORK/finetune" --out-dir "$OUT" \
  --time-limit 215 --threads 8 --init-from "$WORK/base/draft" --data-share 0.45 \
  --samples-per-prompt 1 --gen-new-tokens 160 --prompt-bank 6000 --text-prompts 1500 --bank-samples 1 \
  --bank-new-tokens 96 --passages 3072 --gen-frac 0.85 --lr 3e-4 --warmup 30 --steps 4000 \
  --log-every 50 --export-reserve 15
