#!/usr/bin/env bash
# Session 16, call 7: the final build after a read of the change (attention: heads of up to 64
# stage keys and values at once in buffers of their own, heads past 128 half a chunk at a time,
# blocks of up to 1024 threads; the staged product chosen for a stack's rows): selftest with the
# step on the synthetic 1.5B; v(n) of HEAD of session 15 (treespec-a) and this build interleaved on
# the 1.5B and the 8B shape, the drafter's step beside; exactness of every mode on the synthetic pair.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
gunzip -c .stage/bin/treespec-a.gz > $S/treespec-a && chmod +x $S/treespec-a
B=$S/treespec; A=$S/treespec-a
for shape in qwen2.5-1.5b qwen2.5-0.5b qwen3-8b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf; T8=$S/synth-qwen3-8b.gguf
timeout 150 $B selftest --device cuda -m $T > $OUT/selftest.txt 2>&1; echo "selftest rc=$?"; grep -i "attention \[\|fail\|differs\|bit for bit" $OUT/selftest.txt | head -8; tail -1 $OUT/selftest.txt
ROWS=1,16,32,64,128,256
for run in a b a2 b2; do
  case $run in a*) X=$A;; *) X=$B;; esac
  timeout 60 $X bench --device cuda --costs --target $T --drafter $D --cost-rows $ROWS > $OUT/costs-$run.md 2>&1
  echo "== $run rc=$?"; grep "verify\|decode step (1" $OUT/costs-$run.md | awk -F'|' '{print $3, $4, $5}' | tr '\n' ';'; echo
done
for run in a b; do
  case $run in a*) X=$A;; *) X=$B;; esac
  timeout 90 $X bench --device cuda --costs --target $T8 --drafter $D --cost-rows 1,16,64,256 > $OUT/costs8b-$run.md 2>&1
  echo "== 8B $run rc=$?"; grep "verify\|decode step (1" $OUT/costs8b-$run.md | awk -F'|' '{print $3, $4, $5}' | tr '\n' ';'; echo
done
timeout 90 $B bench --device cuda --target $T --drafter $D --limit 2 --max-tokens 48 \
  --modes ar,linear,tree,tree:32x8,tree:64x8 > $OUT/bench-synth.log 2>&1
echo "bench rc=$?"; tail -8 $OUT/bench-synth.log
