#!/usr/bin/env bash
# Session 25, call 4 (a fresh machine after the lease was lost; run-2026-12-06a/l1.sh just before):
# the files again, `bench --products` with the 27B shapes while they are written, the selftest
# (the warp-a-row kernels of 1, 2 and 4 rows bit for bit as every other), then plain
# decoding side by side: treespec `generate --mode ar` with the warp-a-row kernel (default),
# without it (TREESPEC_MMTC_WARP=0) and with the dp4a products (TREESPEC_TENSOR_CORES=0) on the
# 27B-shaped hybrid and the 8B-shaped dense file, interleaved; llama-bench tg128 on both files.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
nvidia-smi --query-gpu=name --format=csv,noheader
xz -dc .stage/bin/treespec.xz > $S/treespec && chmod +x $S/treespec
xz -dc .stage/tok/tokenizer.gguf.xz > $S/tok.gguf
B=$S/treespec
for sh in qwen3.6-27b:q27 qwen3-8b:q8b qwen3.5-0.8b:q08; do
  [ -f $S/${sh#*:}.gguf ] || $B synth --shape ${sh%:*} --tokenizer-from $S/tok.gguf --out $S/${sh#*:}.gguf > /dev/null 2>&1 &
done
timeout 200 $B bench --products --device cuda > $OUT/products.md 2>&1
echo "products rc=$? at ${SECONDS}s"; grep '27B' $OUT/products.md | grep '| 1 |' | cut -c1-200
wait; echo "synth at ${SECONDS}s"
timeout 120 $B selftest --device cuda -m $S/q08.gguf > $OUT/selftest08.txt 2>&1
echo "selftest rc=$? at ${SECONDS}s: $(tail -1 $OUT/selftest08.txt | cut -c1-120)"
grep 'tensor-core product q' $OUT/selftest08.txt | cut -c1-150
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
gen() {
  env $2 timeout 70 $B generate --device cuda -m $S/$1.gguf --mode ar -p "$P" --max-tokens 128 > $OUT/gen.txt 2>$OUT/g.err
  echo "generate $1 [$2] rc=$? at ${SECONDS}s: $(tail -1 $OUT/g.err | sed 's/.*\] //')"
}
for v in TREESPEC_MMTC_WARP=1 TREESPEC_MMTC_WARP=0 TREESPEC_TENSOR_CORES=0; do gen q8b $v; done
for v in TREESPEC_MMTC_WARP=1 TREESPEC_TENSOR_CORES=0 TREESPEC_MMTC_WARP=0; do gen q27 $v; done
for v in TREESPEC_MMTC_WARP=1 TREESPEC_TENSOR_CORES=0; do gen q8b $v; done
while [ ! -f /root/llama/done ] && [ $SECONDS -lt 420 ]; do sleep 5; done
for m in q27 q8b; do
  timeout 60 /root/llama/build/bin/llama-bench -m $S/$m.gguf -ngl 99 -p 0 -n 128 -r 3 -o md > $OUT/llama-bench-$m.md 2>&1
  echo "llama-bench $m rc=$? at ${SECONDS}s: $(grep tg128 $OUT/llama-bench-$m.md)"
done
[ $SECONDS -lt 500 ] && gen q27 TREESPEC_MMTC_WARP=1
[ $SECONDS -lt 540 ] && gen q27 TREESPEC_TENSOR_CORES=0
