#!/usr/bin/env bash
# Session 17, call 2: a build whose kernels are PTX alone (TREESPEC_CUDA_SASS=none: every module
# compiled by the driver at load, the path a GPU newer than the build takes) runs selftest with
# the step; then spans of 1, 2 and 4 warps a head (TREESPEC_ATT_SPLIT) interleaved on the 1.5B
# and the 8B shape with call 1's build.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
gunzip -c .stage/bin/treespec-ptx.gz > $S/treespec-ptx && chmod +x $S/treespec-ptx
B=$S/treespec; P=$S/treespec-ptx
for shape in qwen2.5-1.5b qwen2.5-0.5b qwen3-8b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf; T8=$S/synth-qwen3-8b.gguf
rm -rf ~/.nv/ComputeCache
/usr/bin/time -f "%e s" timeout 200 $P selftest --device cuda -m $T > $OUT/selftest-ptx.txt 2>&1; echo "selftest PTX-only rc=$?"; tail -2 $OUT/selftest-ptx.txt
ROWS=1,4,8,16,32,64,256
for run in s1 s2 s4 s1b s2b s4b; do
  SP=${run:1:1}
  TREESPEC_ATT_SPLIT=$SP timeout 60 $B bench --device cuda --costs --target $T --drafter $D --cost-rows $ROWS > $OUT/costs-$run.md 2>&1
  echo "== $run rc=$?"; grep "verify\|decode step (1" $OUT/costs-$run.md | awk -F'|' '{print $3, $4}' | tr '\n' ';'; echo
done
for run in s1 s2 s4; do
  SP=${run:1:1}
  TREESPEC_ATT_SPLIT=$SP timeout 90 $B bench --device cuda --costs --target $T8 --drafter $D --cost-rows 1,4,16,64,256 > $OUT/costs8b-$run.md 2>&1
  echo "== 8B $run rc=$?"; grep "verify\|decode step (1" $OUT/costs8b-$run.md | awk -F'|' '{print $3, $4}' | tr '\n' ';'; echo
done
