#!/usr/bin/env bash
# Session 19, call 5 (a fresh machine, synthetic models): the range call 1 missed, rows of 513 to
# 1,024 keys (chunks of 64 by count), and whether a second warp a head still pays with chunks of 32
# (its span is empty there): after 256 and 700 tokens, chunks by count (auto), of 128, and by count
# with one warp a head (TREESPEC_ATT_SPLIT=1), interleaved twice; steps and passes of 1, 8, 16, 64.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
for shape in qwen2.5-1.5b qwen2.5-0.5b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1 &
done; wait
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf
for p in 256 700; do for run in auto c128 s1 auto2 c128b s1b; do
  case $run in c128*) C=128; SP=;; s1*) C=auto; SP=1;; *) C=auto; SP=;; esac
  TREESPEC_ATT_SPLIT=$SP TREESPEC_ATT_CHUNK=$C timeout 20 $B bench --device cuda --costs --context 8192 --cost-prefix $p \
    --target $T --drafter $D --cost-rows 1,8,16,64 > $S/costs-p$p-$run.md 2>&1
  echo "== p$p $run rc=$? at ${SECONDS}s"; grep "verify\|decode step (1\|drafter decode" $S/costs-p$p-$run.md | awk -F'|' '{print $3, $4}' | tr '\n' ';'; echo
done; done | tee $OUT/c5.txt
tar -czf $OUT/costs.tgz -C $S $(cd $S && ls costs-*.md)
