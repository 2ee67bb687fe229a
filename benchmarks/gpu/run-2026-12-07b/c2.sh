#!/usr/bin/env bash
# Session 30, call 2 (the same machine right after c1.sh; carry [".stage/l"] only: the binary and
# the files are already there): llama.cpp built (about 5 minutes) while treespec decodes, then
# llama-bench tg128 beside treespec `generate --mode ar` on the 27B- and 8B-shaped files.
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /root/llama && tar -xJf .stage/l/llama.tar.xz -C /root/llama
(cd /root/llama && setsid nohup bash -c "cmake -S . -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DCMAKE_BUILD_TYPE=Release && cmake --build build --target llama-bench -j14 \
  && touch /root/llama/done" > /root/llama/build.log 2>&1 < /dev/null &)
source benchmarks/gpu/lib.sh
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
gen() {
  env $2 timeout 70 $B generate --device cuda -m $S/$1.gguf --mode ar -p "$P" --max-tokens 128 > $OUT/gen.txt 2>$OUT/g.err
  echo "generate $1 [$2] rc=$? at ${SECONDS}s: $(tail -1 $OUT/g.err | sed 's/.*\] //')"
}
while [ ! -f /root/llama/done ] && [ $SECONDS -lt 460 ]; do sleep 5; done
echo "llama at ${SECONDS}s: $(tail -1 /root/llama/build.log | cut -c1-120)"
for m in q27 q8b; do
  gen $m X=1
  [ -f /root/llama/done ] && timeout 50 /root/llama/build/bin/llama-bench -m $S/$m.gguf -ngl 99 -p 0 -n 128 -r 3 -o md > $OUT/llama-bench-$m.md 2>&1
  echo "llama-bench $m rc=$? at ${SECONDS}s: $(grep tg128 $OUT/llama-bench-$m.md)"
  gen $m X=1
done
