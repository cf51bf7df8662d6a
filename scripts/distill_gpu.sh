#!/usr/bin/env bash
# Train the feature draft on one GPU in at most 9 minutes, with no hand steps, and print its evaluation.
# The one prepared command for a GPU session (issue 34):
#
#   bash scripts/distill_gpu.sh                # on the GPU machine, from the repository root
#
# Time plan on one H100 (80 GB), all inside one `python -m dynatree_core.distill` process:
#   ~30 s      start, target load (GGUF, dequantized)
#   <= 30%     of TIME_LIMIT: data - greedy bf16 target continuations of the bundled prompts (3 samples each),
#              of generated prompts (topic bank; the six everyday kinds in chat and raw form, the recipe of
#              scripts/distill_everyday_cpu.sh) and of training-text passages, in batches of 1024 by the KV-cached
#              left-padded loop (never wiki.test.raw or pg19/: they are the evaluation text); generation
#              stops when its share is used up (jobs run in a shuffled order, so a partial run holds a mix)
#   ~30-60 s   features: the fp32 target reads every sequence and 2M tokens of training text once
#   the rest   training (warm start from the shipped independent draft, unrolled 3 steps, cosine schedule
#              compressed into the time left), until TIME_LIMIT (390 s) minus the export reserve
#   ~10 s      export: fp16 weights in parts of at most 15 MB (model-0000i-of-0000n.safetensors and
#              model.safetensors.index.json; load_feature_draft / ModelPair.default(feature_draft=...) join
#              them), plus feature_draft_config.json with the command, data, steps and device
#   ~60-100 s  evaluation on the GPU (fp32; the same prompts, passages and lookup mixture as the CPU
#              evaluation), printed as JSON and written to $WORK/eval.json
# About 8-8.5 minutes in all; the script prints the elapsed time and warns past 9.
#
# Then copy $OUT back (each file <= 15 MB) and, on the project's CPU, compare it with the shipped draft:
#   dynatree distill --kind feature --eval-only --with-lookup --out-dir <copied folder>
#   dynatree bench --methods ar,linear,dynatree:cpu --linear-k 3,4,5 --num-prompts 8 --warmup 1 \
#       --drafter feature+lookup --draft <copied folder>
#
# A draft for speculative *sampling* at temperature T (issue 39): the soft loss becomes KL(p_T || q_T)
# between the target's and the draft's distributions at T (both logits / T), recorded in the draft's
# metadata ("temperature"); --alpha 1 drops the greedy-token term, leaving that KL alone:
#   bash scripts/distill_gpu.sh --temperature 0.7 --alpha 1      # or TEMPERATURE=0.7 bash scripts/distill_gpu.sh
#
# Environment: DATA_DIR (../shared/data), WORK (.distill/gpu), OUT ($WORK/draft), DEVICE (cuda),
# TIME_LIMIT (390 s: data + features + training), TEMPERATURE (1: the shipped draft's loss). Extra
# arguments are passed on and override the defaults below (the CPU test runs the same pipeline at a
# tiny size this way).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA_DIR=${DATA_DIR:-../shared/data}
WORK=${WORK:-.distill/gpu}
OUT=${OUT:-$WORK/draft}
DEVICE=${DEVICE:-cuda}
PY=${PYTHON:-python}
start=$(date +%s)
echo "[distill_gpu] $(date -u '+%Y-%m-%d %H:%M:%S UTC') commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') device $DEVICE"
$PY -m dynatree_core.distill --kind feature --device "$DEVICE" --eval-device "$DEVICE" --threads 4 \
  --data-dir "$DATA_DIR" --work-dir "$WORK" --out-dir "$OUT" \
  --time-limit "${TIME_LIMIT:-390}" --data-share 0.3 --export-reserve 15 \
  --init-from dynatree_core/assets/smollm2-135m-draft --teacher-dtype float32 --gen-dtype bfloat16 \
  --samples-per-prompt 3 --gen-batch 1024 --gen-new-tokens 192 --passages 8192 --passage-new-tokens 160 \
  --prompt-bank 3000 --text-prompts 750 --kind-prompts 3000 --bank-samples 1 --bank-new-tokens 96 \
  --feature-text-tokens 2000000 --feature-batch-tokens 65536 --max-len 384 \
  --batch-tokens 24576 --micro-tokens 0 --lr 5e-4 --warm-lr-frac 0.25 --reg-weight 0.1 --warmup 50 \
  --steps 100000 --unroll 3 --val-rows 64 --log-every 50 \
  --temperature "${TEMPERATURE:-1}" --part-mb 15 --evaluate --with-lookup "$@"
elapsed=$(( $(date +%s) - start ))
echo "[distill_gpu] done in ${elapsed} s; the draft (parts of <= 15 MB each):"
ls -l "$OUT"
if [ "$elapsed" -gt 540 ]; then
  echo "[distill_gpu] WARNING: ${elapsed} s is over the 9-minute plan; lower TIME_LIMIT" >&2
fi
