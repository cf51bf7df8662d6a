#!/usr/bin/env bash
# The fast-path table in one device call (issue 57): AR, linear K=3, DynaTree `gpu` and EAGLE-2 on `graphs` and
# `compiled` in bf16 on the default pair, then the fp32 exactness check (every method's tokens equal AR's), with
# every compile and capture done before a clock starts and reported apart. Run by the table plan's last call
# (scripts/gpu_stage.py prepare: call 2 unpacks the payload and runs this); nothing is downloaded.
#
#   bash scripts/gpu_table.sh --out "$OUT/table"          # on the GPU machine (<= 7.5 minutes)
#   DEVICE=cpu bash scripts/gpu_table.sh --out /tmp/t      # the CPU dry run of the same plan (tests/test_gpu_stage.py)
#
# Time plan on a GPU (budget 420 s of gpu_check, the call's timeout 480 s):
#   ~30 s     start, the default pair loaded in bf16 (the GGUF dequantized)
#   <= 300 s  bench: per runtime (graphs, then compiled) and dataset (WikiText-2, then PG-19), N=3 prompts (W=1),
#             T=192, L_max 256; each (method, runtime, path) decoded once untimed first, so the regions and forwards
#             compile there (compiled: ~1-3 minutes the first time on a machine); a chunk that would pass the limit
#             is skipped and said so; bench.json is rewritten after every chunk
#   <= 75 s   exact: the four methods in fp32 on graphs, 1 prompt, T=64 (add compiled with EXACT_RUNTIMES)
# It writes gpu_check.json, gpu_check.txt (the summary), bench.json and exact.json to --out; the session copies them
# to docs/gpu/<date>-<device>/ with `python scripts/gpu_stage.py land <files_at>/table`.
#
# On a CPU (DEVICE=cpu) graphs cannot run: the dry run times `static` (the graphs runtime's bookkeeping without the
# capture) and `compiled` through dynamo's eager backend (DYNATREE_COMPILE_BACKEND=eager: the same graphs, guards and
# recompile limit, no code generation), on the tiny random pair at T=8, in seconds; its fp32 check runs on static, as
# the GPU's runs on graphs.
# Environment: DEVICE (cuda), TARGET (default; the dry run: tiny-llama), EXACT_RUNTIMES, PYTHON. Extra arguments go
# to scripts/gpu_check.py and override these.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
cd "$root"
DEVICE=${DEVICE:-cuda}
methods=(--base-methods ar,linear --linear-k 3 --presets gpu --policies eagle2 --sections bench,exact
         --bench-dtype bfloat16 --no-progress)
if [ "$DEVICE" = cpu ]; then
  export DYNATREE_COMPILE_BACKEND=eager
  sizes=(--device cpu --target "${TARGET:-tiny-llama}" --runtimes static,compiled
         --exact-runtimes "${EXACT_RUNTIMES:-static}" --datasets wikitext2 --bench-prompts 1
         --bench-warmup 0 --bench-tokens 8 --bench-prompt-len 16 --exact-prompts 1 --exact-tokens 8
         --budget-s 120 --limit-bench 90 --limit-exact 30)
else
  sizes=(--device "$DEVICE" --target "${TARGET:-default}" --runtimes graphs,compiled
         --exact-runtimes "${EXACT_RUNTIMES:-graphs}" --datasets wikitext2,pg19 --bench-prompts 3
         --bench-warmup 1 --bench-tokens 192 --bench-prompt-len 256 --exact-prompts 1 --exact-tokens 64
         --budget-s 420 --limit-bench 300 --limit-exact 75)
fi
echo "[gpu_table] $(date -u '+%Y-%m-%d %H:%M:%S UTC') commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') device $DEVICE"
exec "${PYTHON:-python3}" scripts/gpu_check.py "${methods[@]}" "${sizes[@]}" "$@"
