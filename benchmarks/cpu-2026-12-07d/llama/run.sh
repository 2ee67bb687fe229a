#!/usr/bin/env bash
# treespec against llama.cpp on this CPU (2 cores), same file: the Qwen3.5-0.8B-shaped hybrid
# (`treespec synth --shape qwen3.5-0.8b --tokenizer-from` the Qwen2.5 tokenizer; random weights,
# its MTP block included), plain decoding and MTP chains of 3 drafted every step (no threshold:
# `mtp:3@0`; llama.cpp's `--spec-type draft-mtp --spec-draft-n-max 3`), greedy, 64 tokens,
# alternated ROUNDS times. llama.cpp: the vendored llama-cpp-python 0.3.36 sdist's llama.cpp,
# `cmake -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF` and
# `--target llama-speculative-simple llama-bench` (the `llama` app does not link without the
# server). T: treespec's release binary; L: llama.cpp's bin folder; M: the synthetic file.
T=${T:-target/release/treespec}; L=${L:-/tmp/llx/build/bin}; M=${M:-/tmp/cmp/q08.gguf}
P="Write a short poem about the sea."
printf '{"prompt": "%s", "category": "writing"}\n' "$P" > /tmp/cmp/one.jsonl
for r in $(seq ${ROUNDS:-3}); do
  echo "round $r"
  $L/llama-bench -m $M -p 0 -n 64 -t 2 -r 1 2>&1 | grep tg64 | awk -F'|' '{print "llama-bench tg64:" $(NF-1)}'
  $T bench --device cpu --target $M --prompts /tmp/cmp/one.jsonl --max-tokens 64 --modes ar,mtp:3@0 \
    --require-identical 2>&1 | grep "^| ar \|^| mtp" | cut -d'|' -f2-4 | sed 's/^/treespec /'
  $L/llama-speculative-simple -m $M --spec-type draft-mtp --spec-draft-n-max 3 -p "$P" -n 64 \
    --temp 0 -t 2 -c 1024 2>&1 | grep "decoded\|accept " | sed 's/^.* I /llama.cpp draft-mtp /'
done
