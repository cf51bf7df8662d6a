#!/usr/bin/env bash
# The device-resident draft phase (issue 49) on the CPU: ops, reads and host time per draft level, before
# and after, each code tree in its own processes, alternately, on a quiet machine.
#   bash run.sh BEFORE_CHECKOUT AFTER_CHECKOUT OUT_DIR [--skip-counts]
set -euo pipefail
before=$1; after=$2; out=$3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
# 1. dispatched ops per draft level and host reads per iteration on the fast path (static runtime: what a
#    GPU would launch, dispatched and counted here), default pair; the same script on both trees (counts:
#    no quiet machine needed; with --skip-counts, step 1 is left out)
if [ "${4:-}" != "--skip-counts" ]; then
  for side in before after; do
    tree=$([ $side = before ] && echo "$before" || echo "$after")
    PYTHONPATH="$tree" python "$after/scripts/count_ops.py" --runtime static --tokens 24 --top 12 \
      --methods ar,dynatree:gpu,eagle2,linear > "$out/ops_static_$side.txt"
    PYTHONPATH="$tree" python "$after/scripts/count_ops.py" --runtime eager --tokens 24 --top 12 \
      --methods ar,dynatree:cpu,linear > "$out/ops_eager_$side.txt"
  done
fi
# 2. host time of the draft phase on the tiny pair (forwards nearly free), alternately
for rep in 1 2; do
  for side in before after; do
    tree=$([ $side = before ] && echo "$before" || echo "$after")
    for rt in static eager; do
      PYTHONPATH="$tree" python "$here/host_time.py" --runtime $rt --out "$out/host_${rt}_${side}_$rep.json" \
        > "$out/host_${rt}_${side}_$rep.txt"
    done
  done
done
# 3. the main job's DynaTree against AR on the CPU's default runtime (eager), alternately
for rep in 1 2; do
  for side in before after; do
    tree=$([ $side = before ] && echo "$before" || echo "$after")
    PYTHONPATH="$tree" python -m dynatree_core.cli bench --methods ar,dynatree --dataset wikitext2,pg19 \
      --num-prompts 4 --warmup 1 --max-new-tokens 128 --no-progress --out "$out/bench_${side}_$rep" > "$out/bench_${side}_$rep.txt" 2>&1
  done
done
