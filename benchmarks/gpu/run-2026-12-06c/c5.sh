#!/usr/bin/env bash
# Session 25, call 6 (same machine as c4.sh and c3.sh, which is call 5: its modes line asked for
# `mtp`, which this file's loader refused): every mode but `mtp` exactly `ar`'s through the hybrid
# step, and the 27B's verify passes with graphs on.
S=/root/stage; export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64; export TREESPEC_CACHE=$S/cache; B=$S/treespec; T=$S/q27.gguf; D=$S/q08.gguf
timeout 150 $B bench --device cuda --target $T --drafter $D --modes ar,linear,tree:16x4 --limit 1 --max-tokens 32 --require-identical > $OUT/modes27.md 2>&1; echo "modes rc=$? at ${SECONDS}s"; grep -v '^$' $OUT/modes27.md | tail -6 | cut -c1-200
timeout 150 $B bench --device cuda --costs --target $T --drafter $D --cost-rows 1,4,8,64 > $OUT/costs27.md 2>&1; echo "costs rc=$? at ${SECONDS}s"; grep -v '^$' $OUT/costs27.md | head -12 | cut -c1-160
