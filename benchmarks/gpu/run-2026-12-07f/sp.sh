#!/usr/bin/env bash
# One part of the target a call (carry [".stage/p/t.NN"]; heads/ and tests/data/ moved aside
# here), with the detached DFlash check's progress (c1.sh).
S=/root/stage; mkdir -p $S/p; cp -n .stage/p/t.* $S/p/ 2>/dev/null; echo "$(ls $S/p | wc -l) parts, $(du -sb $S/p | cut -f1) bytes"
tail -2 $S/x1.log; tail -c 300 $S/train.log 2>/dev/null | tr '\r' '\n' | tail -2
