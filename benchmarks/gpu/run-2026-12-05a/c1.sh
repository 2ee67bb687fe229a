#!/usr/bin/env bash
# Session 21: stage whatever .stage/bin carries (xz; the tree leaves ~18 MB a call), then run the
# Qwen3.5 test binaries staged so far on the GPU (TREESPEC_TEST_DEVICE=cuda: the hybrid target
# and its MTP head on candle's CUDA ops; greedy linear / tree / mtp against ar).
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
for f in .stage/bin/*.xz; do
  b=$(basename $f .xz)
  python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" $f $S/$b && chmod +x $S/$b
done
ls $S
for t in qwen35 qwen35_mtp; do
  [ -x $S/$t ] && [ ! -f $S/done-$t ] || continue
  TREESPEC_TEST_DEVICE=cuda timeout 120 $S/$t --test-threads 1 > $OUT/gpu-$t.txt 2>&1
  echo "$t on cuda rc=$? at ${SECONDS}s"; touch $S/done-$t
  grep -E "^test |test result|panicked|off by|logit " $OUT/gpu-$t.txt | head -30
done
