#!/usr/bin/env bash
# After c1.sh and 20 x sp.sh: the detached DFlash check's results back, then the training run
# named by RUN (default ../run-2026-12-07c/e1.sh, the EAGLE-3 head; or
# ../run-2026-12-07d/d1.sh, the DFlash drafter; env as there).
S=/root/stage
cat $S/x1.log; grep "^| " $S/bench-x1.md | head -6; tail -c 600 $S/train.log | tr '\r' '\n' | tail -4
cp $S/x1.log $S/train.log $S/bench-x1.md $S/dx.json $OUT/ 2>/dev/null
bash ${RUN:-benchmarks/gpu/run-2026-12-07c/e1.sh}
