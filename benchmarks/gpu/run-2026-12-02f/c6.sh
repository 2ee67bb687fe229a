#!/usr/bin/env bash
# Session 15, call 6: the DFlash drafter's context and block rows through one q/k/v product a layer
# (treespec) against two (treespec-a, commit 17d506d), interleaved a, b, a, b: the 8B setting's
# drafter pass and round at B = 63.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
gunzip -c .stage/bin/treespec-a.gz > $S/treespec-a && chmod +x $S/treespec-a
B=$S/treespec; A=$S/treespec-a
[ -f $S/synth-qwen3-8b.gguf ] || $B synth --shape qwen3-8b --out $S/synth-qwen3-8b.gguf > /dev/null 2>&1
[ -d $S/dflash-8b ] || $B synth --shape qwen3-8b --dflash --out $S/dflash-8b > /dev/null 2>&1
for run in a b a2 b2; do
  case $run in a*) X=$A;; *) X=$B;; esac
  timeout 45 $X bench --device cuda --wide-verify --costs --target $S/synth-qwen3-8b.gguf --drafter $S/dflash-8b --cost-rows 64 > $OUT/dflash-$run.md 2>&1
  echo "== $run rc=$?"; grep "DFlash\|round" $OUT/dflash-$run.md | awk -F'|' '{print $2, $4, $5}'
done
