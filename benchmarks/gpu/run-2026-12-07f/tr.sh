#!/usr/bin/env bash
# After tq.sh on the same machine: the 27B-shaped hybrid's verify passes at chain and small-tree
# row counts, and rounds of trees over its own MTP block (random weights: nothing is accepted, so
# a round's speed against `ar` is one over its cost in steps).
source benchmarks/gpu/lib.sh
timeout 100 $B bench --device cuda --costs --target $S/q27.gguf --drafter $S/s15.gguf --cost-rows 1,2,4,5,9,17,33,64 > $OUT/costs-q27.md 2>&1
echo "costs rc=$? at ${SECONDS}s"; grep "^| target" $OUT/costs-q27.md | cut -d'|' -f3-5 | tr '\n' ';'; echo
timeout 120 $B bench --device cuda --target $S/q27.gguf --drafter mtp --prompts $S/one.jsonl --max-tokens 64 \
  --modes ar,mtp:3@0,tree:4x4@0,tree:8x4@0,tree:16x4@0 --require-identical > $OUT/trees-q27.md 2>&1
echo "trees rc=$? at ${SECONDS}s"; grep "^| " $OUT/trees-q27.md | cut -d'|' -f2-5; tail -1 $OUT/trees-q27.md
