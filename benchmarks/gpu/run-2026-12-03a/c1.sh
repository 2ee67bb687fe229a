#!/usr/bin/env bash
# Session 17, call 1: attention chunks split over 4 warps a head (TREESPEC_ATT_SPLIT=1: the
# kernel as before, one warp a head), and the kernels as fatbins (SASS for sm_90, sm_100,
# sm_120, PTX for compute_90). selftest with the step on the synthetic 1.5B and 0.5B; the same
# with CUDA_FORCE_PTX_JIT=1 (every module compiled from its PTX by the driver, the path a newer
# GPU takes); v(n) and the drafter's step with split 1 and 4 interleaved on the 1.5B and the 8B
# shape; exactness of every mode on the synthetic pair.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
for shape in qwen2.5-1.5b qwen2.5-0.5b qwen3-8b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf; T8=$S/synth-qwen3-8b.gguf
for m in $T $D; do
  n=$(basename $m .gguf)
  /usr/bin/time -f "%e s" timeout 150 $B selftest --device cuda -m $m > $OUT/selftest-$n.txt 2>&1; echo "selftest $n rc=$?"; tail -2 $OUT/selftest-$n.txt
done
CUDA_FORCE_PTX_JIT=1 /usr/bin/time -f "%e s" timeout 200 $B selftest --device cuda -m $T > $OUT/selftest-jit.txt 2>&1; echo "selftest JIT rc=$?"; tail -2 $OUT/selftest-jit.txt
ROWS=1,16,32,64,128,256
for run in s1 s4 s1b s4b; do
  case $run in s1*) SP=1;; *) SP=4;; esac
  TREESPEC_ATT_SPLIT=$SP timeout 60 $B bench --device cuda --costs --target $T --drafter $D --cost-rows $ROWS > $OUT/costs-$run.md 2>&1
  echo "== $run rc=$?"; grep "verify\|decode step (1" $OUT/costs-$run.md | awk -F'|' '{print $3, $4, $5}' | tr '\n' ';'; echo
done
for run in s1 s4; do
  case $run in s1*) SP=1;; *) SP=4;; esac
  TREESPEC_ATT_SPLIT=$SP timeout 90 $B bench --device cuda --costs --target $T8 --drafter $D --cost-rows 1,16,64,256 > $OUT/costs8b-$run.md 2>&1
  echo "== 8B $run rc=$?"; grep "verify\|decode step (1" $OUT/costs8b-$run.md | awk -F'|' '{print $3, $4, $5}' | tr '\n' ';'; echo
done
timeout 90 $B bench --device cuda --target $T --drafter $D --limit 2 --max-tokens 48 \
  --modes ar,linear,tree,tree:32x8,tree:64x8 > $OUT/bench-synth.log 2>&1
echo "bench rc=$?"; tail -3 $OUT/bench-synth.log
