#!/usr/bin/env bash
# Session 26, call 3 (same machine as c1.sh and c2.sh): the stage clock (TREESPEC_PROFILE=1,
# graphs off) of the 27B-shaped hybrid's 64-row verify pass with the K-quant family
# (TREESPEC_MMQ=1): where its 69.8 ms go, beside the default products' 99.5 ms of c1.sh.
source benchmarks/gpu/lib.sh
T=$S/q27.gguf; D=$S/q08.gguf
TREESPEC_MMQ=1 TREESPEC_PROFILE=1 TREESPEC_CUDA_GRAPHS=0 timeout 200 $B bench --device cuda --costs --target $T --drafter $D \
  --cost-rows 1,64 > $OUT/costs27-mmq-profile.md 2> $OUT/profile27-mmq.txt
echo "profiled costs rc=$? at ${SECONDS}s"; grep -v '^$' $OUT/costs27-mmq-profile.md | tail -4
grep 'gpu 64L\|gpu 1L' $OUT/profile27-mmq.txt | sort -k2,2 -k3,3n | cut -c1-120 | head -40
