#!/usr/bin/env bash
# Fine-tune the shipped feature draft for what users type, on this project's 2-core CPU, in about 45
# minutes (issue 40): one `dynatree distill --kind feature` command.
#   data (<= 30% of the time limit): greedy target continuations of generated prompts of the six
#         everyday kinds (instruction, question, story, list, code, dialogue), each in chat-template
#         and raw form (--kind-prompts), of the bundled prompts (both forms) and of training-text
#         passages, so the passages are not forgotten; plus the training text;
#   features: the fp32 target reads every sequence once (its final hidden states and greedy tokens);
#   train: the shipped feature draft itself, warm (--init-from a feature draft: every weight at --lr,
#         its 8k head kept), unrolled 3 steps, cosine schedule over the wall-clock budget, then export.
# scripts/distill_gpu.sh uses the same prompt recipe at scale. Needs ../shared/data (or DATA_DIR=...).
# Extra arguments are passed on and override the defaults below.
#
#   bash scripts/distill_everyday_cpu.sh
#   dynatree distill --kind feature --eval-only --with-lookup --out-dir .distill/everyday/draft
#   python docs/bench/2026-11-28-everyday-prompts/measure_agreement.py --draft .distill/everyday/draft
set -euo pipefail
cd "$(dirname "$0")/.."
DATA_DIR=${DATA_DIR:-../shared/data}
WORK=${WORK:-.distill/everyday}
OUT=${OUT:-$WORK/draft}
PY=${PYTHON:-python}
$PY -m dynatree_core.distill --kind feature --device cpu --threads 2 --data-dir "$DATA_DIR" --work-dir "$WORK" \
  --out-dir "$OUT" --time-limit "${TIME_LIMIT:-2700}" --data-share 0.3 --export-reserve 60 \
  --init-from dynatree_core/assets/smollm2-135m-feature-draft --teacher-dtype float32 --gen-dtype bfloat16 \
  --kind-prompts 600 --prompt-bank 0 --text-prompts 0 --bank-samples 0 --bank-new-tokens 96 \
  --samples-per-prompt 0 --gen-new-tokens 96 --gen-batch 128 \
  --passages 256 --passage-new-tokens 96 --passage-min 32 --passage-max 256 \
  --feature-text-tokens 200000 --feature-batch-tokens 8192 --max-len 384 \
  --batch-tokens 4096 --micro-tokens 4096 --lr 1e-4 --warmup 10 --steps 100000 --unroll 3 \
  --log-every 25 --val-rows 64 "$@"
