#!/usr/bin/env bash
# Issue 42's quiet measurement: each method on eager and compiled (--runtime best), for each freezing
# mode, a cold pass (empty inductor cache) then a warm one (a second process on the same cache).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
modes=${MODES:-"prepack"}
passes=${PASSES:-"cold warm"}
for mode in $modes; do
  export DYNATREE_COMPILE_CACHE=/tmp/dynatree-inductor-$mode
  rm -rf "$DYNATREE_COMPILE_CACHE"
  for pass in $passes; do
    echo "== $mode $pass $(date -u +%H:%M:%S)"
    DYNATREE_COMPILE_FREEZING=$mode dynatree bench --dataset wikitext2,pg19 --methods ar,linear,dynatree \
      --num-prompts 8 --warmup 1 --max-new-tokens 128 --runtime best --out "$here/$mode-$pass.json" \
      > "$here/$mode-$pass.txt" 2> "$here/$mode-$pass.log"
  done
done
echo "== done $(date -u +%H:%M:%S)"
