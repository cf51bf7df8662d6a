#!/usr/bin/env bash
# CPU A/B of the masked target cache: 9cd3002 (gather every iteration) against HEAD, same settings, one after the other
set -u
ARGS="bench --methods ar,linear,fixed_tree,dynatree --linear-k 3 --num-prompts 4 --warmup 1 --max-new-tokens 128 --data-dir /work/shared/data --no-progress --overwrite"
cd /tmp/old_wt && /work/main/.venv/bin/python -m dynatree_core.cli $ARGS --out /tmp/ab/old.json > /tmp/ab/old.log 2>&1
cd /work/main && /work/main/.venv/bin/python -m dynatree_core.cli $ARGS --out /tmp/ab/new.json > /tmp/ab/new.log 2>&1
cd /tmp/old_wt && /work/main/.venv/bin/python -m dynatree_core.cli $ARGS --out /tmp/ab/old2.json > /tmp/ab/old2.log 2>&1
cd /work/main && /work/main/.venv/bin/python -m dynatree_core.cli $ARGS --out /tmp/ab/new2.json > /tmp/ab/new2.log 2>&1
