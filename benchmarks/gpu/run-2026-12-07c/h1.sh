#!/usr/bin/env bash
# Session 32, call "h1" (carry [".stage/bin/treespec.xz", ".stage/tok", ".stage/llama.tar.xz"]; a
# fresh machine; issues 36 and 37's plain-decoding bars on the card that comes, H200 asked for):
# llama.cpp (llama-cpp-python 0.3.36's vendored copy) built in the background while treespec times
# the same synthetic files (1.5B, Qwen3-8B and Qwen3.6-27B shapes, the real Qwen2.5 tokenizer
# grafted in), then llama-bench on each, then treespec again: treespec / llama-bench on one
# machine and file. The 8B's verify passes (default products and the K-quant family) while the
# build runs.
source benchmarks/gpu/lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /root/llama && tar -xJf .stage/llama.tar.xz -C /root/llama
( cd /root/llama && cmake -S . -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DCMAKE_BUILD_TYPE=Release > build.log 2>&1 \
  && cmake --build build --target llama-bench -j16 >> build.log 2>&1; touch done ) &
stage_synth q8b q27
[ -f $S/q15.gguf ] || $B synth --shape qwen2.5-1.5b --tokenizer-from $S/tok.gguf --out $S/q15.gguf > /dev/null 2>&1
while pgrep -f "treespec synth" > /dev/null; do sleep 1; done; echo "synth at ${SECONDS}s"
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
gen() {
  timeout 60 $B generate --device cuda -m $S/$1.gguf --mode ar -p "$P" --max-tokens 256 > /dev/null 2>$OUT/g.err
  echo "treespec $1 $2: $(tail -1 $OUT/g.err | sed 's/.*decode //')"
}
for f in q15 q8b q27; do gen $f before; done
for m in 0 1; do
  TREESPEC_MMQ=$m timeout 100 $B bench --device cuda --target $S/q8b.gguf --drafter $S/q15.gguf --costs --cost-rows 1,8,64,256 > $OUT/costs-q8b-mmq$m.md 2>&1
  echo "costs q8b MMQ=$m rc=$? at ${SECONDS}s"
done
while [ ! -f /root/llama/done ] && [ $SECONDS -lt 470 ]; do sleep 5; done
echo "llama.cpp built at ${SECONDS}s: $(ls /root/llama/build/bin/ 2>/dev/null | tr '\n' ' ')"; tail -3 /root/llama/build.log
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/root/llama/build/bin
for f in q15 q8b q27; do
  echo "llama-bench $f: $(timeout 60 /root/llama/build/bin/llama-bench -m $S/$f.gguf -ngl 99 -p 0 -n 256 -r 3 -o md 2>&1 | grep tg256)"
  gen $f after
done
cp /root/llama/build.log $OUT/ 2>/dev/null; grep -h "target verify pass\|target decode step" $OUT/costs-*.md | cut -c1-110
