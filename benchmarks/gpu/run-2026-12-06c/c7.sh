#!/usr/bin/env bash
# Session 25, last call: the final binary's selftest after the house split (the step's whole-model
# check, its loader, the attention launcher, the Gated DeltaNet launches, the stacked products
# were split into smaller functions): on the 0.8B hybrid and on a dense 0.5B-shaped file.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
xz -dc .stage/bin/treespec.xz > $S/treespec && chmod +x $S/treespec
xz -dc .stage/tok/tokenizer.gguf.xz > $S/tok.gguf
B=$S/treespec
$B synth --shape qwen3.5-0.8b --tokenizer-from $S/tok.gguf --out $S/q08.gguf > /dev/null 2>&1 &
$B synth --shape qwen2.5-0.5b --out $S/q05.gguf > /dev/null 2>&1
wait
for m in q08 q05; do
  timeout 100 $B selftest --device cuda -m $S/$m.gguf > $OUT/selftest-$m.txt 2>&1
  echo "selftest $m rc=$? at ${SECONDS}s: $(tail -1 $OUT/selftest-$m.txt | cut -c1-100)"
  grep -i "step vs\|compaction\|row pass\|differ\|error:" $OUT/selftest-$m.txt | cut -c1-160
done
