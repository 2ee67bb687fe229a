#!/usr/bin/env bash
# Session 25, call 1 (after run-2026-12-06a/l1.sh started llama.cpp's build): the synthetic
# files; the selftest (every product kernel against the CPU and bit for bit against its one-row
# launch, the warp-a-row kernel included); `bench --products` with Qwen3.6-27B's shapes (the
# one-row kernels of long rows: `_row_long` against `_warp2`/`_warp4` and candle's dp4a kernel);
# a first look at `generate` on the 27B shape (llama.cpp builds meanwhile: timings are rough).
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
# (llama.cpp: run-2026-12-06a/l1.sh ran just before, in a call of its own: the tree and both carries pass 64 MiB)
xz -dc .stage/bin/treespec.xz > $S/treespec && chmod +x $S/treespec
xz -dc .stage/tok/tokenizer.gguf.xz > $S/tok.gguf
B=$S/treespec; T=$S/q27.gguf; D=$S/q08.gguf
[ -f $T ] || $B synth --shape qwen3.6-27b --tokenizer-from $S/tok.gguf --out $T > $OUT/synth27.txt 2>&1 &
[ -f $S/q8b.gguf ] || $B synth --shape qwen3-8b --tokenizer-from $S/tok.gguf --out $S/q8b.gguf > /dev/null 2>&1 &
[ -f $D ] || $B synth --shape qwen3.5-0.8b --tokenizer-from $S/tok.gguf --out $D > $OUT/synth08.txt 2>&1
timeout 150 $B selftest --device cuda -m $D > $OUT/selftest08.txt 2>&1
echo "selftest rc=$? at ${SECONDS}s: $(grep -ci 'error\|differ' $OUT/selftest08.txt) error lines"
grep -i 'tensor-core product\|error\|differ' $OUT/selftest08.txt | cut -c1-200 | head -14
timeout 240 $B bench --products --device cuda > $OUT/products.md 2>&1
echo "products rc=$? at ${SECONDS}s"; grep -i '27B\|error' $OUT/products.md | grep '| 1 |\|error' | cut -c1-200
wait; echo "synth at ${SECONDS}s"; ls -la $T $D | cut -c1-120
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
for v in TREESPEC_MMTC_WARP=1 TREESPEC_MMTC_WARP=0 TREESPEC_TENSOR_CORES=0; do
  env $v timeout 60 $B generate --device cuda -m $T --mode ar -p "$P" --max-tokens 64 > $OUT/gen.txt 2>$OUT/gen-${v}.err
  echo "generate [$v] rc=$? at ${SECONDS}s: $(tail -1 $OUT/gen-${v}.err | sed 's/.*\] //')"
done
tail -2 /root/llama/build.log
