#!/usr/bin/env bash
# Session 25, call 3 (same machine): where the 27B's verify passes go, stage by stage
# (TREESPEC_PROFILE=1 with graphs off: the step's stage clock), and every mode exactly `ar`'s
# through the hybrid step with the new one-row kernel.
S=/root/stage
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
B=$S/treespec; T=$S/q27.gguf; D=$S/q08.gguf
TREESPEC_PROFILE=1 TREESPEC_CUDA_GRAPHS=0 timeout 200 $B bench --device cuda --costs --target $T --drafter $D \
  --cost-rows 1,8,64 > $OUT/costs27-profile.md 2> $OUT/profile27.txt
echo "profiled costs rc=$? at ${SECONDS}s"; grep -v '^$' $OUT/costs27-profile.md | tail -6
grep 'gpu 64L' $OUT/profile27.txt | sort -k2,2 -k3,3n | cut -c1-120
timeout 150 $B bench --device cuda --target $T --drafter $D --modes ar,linear,tree:16x4,mtp --limit 1 \
  --max-tokens 32 --require-identical > $OUT/modes27.md 2>&1
echo "modes rc=$? at ${SECONDS}s"; grep -v '^$' $OUT/modes27.md | tail -8 | cut -c1-200
