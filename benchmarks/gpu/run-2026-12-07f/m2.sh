#!/usr/bin/env bash
# Session 35 (issue 37, item 5; BENCHMARKS.md section 52). Carry [".stage/bin/treespec.xz",
# ".stage/tok/tokenizer.gguf.xz", ".stage/llama.tar.xz"], tests/data moved aside. MTP chains
# beside llama.cpp's on the same file: the Qwen3.6-27B-shaped hybrid (`treespec synth`, random
# weights with its MTP block, the Qwen2.5 tokenizer grafted in). llama.cpp (the vendored
# llama-cpp-python 0.3.36 copy) is built in the background, only llama-bench and
# llama-speculative-simple (the `llama` app does not link without the server). While it builds:
# treespec `ar`, `mtp:1@0` and `mtp:3@0` (a chain drafted every step, no threshold), then
# ../run-2026-12-07d/x1.sh's DFlash check (issue 38), so that no two timings share the GPU. Then
# llama-bench tg128 and `llama-speculative-simple --spec-type draft-mtp --spec-draft-n-max 1|3`,
# greedy, the same prompt; then treespec again. The random head is never accepted by either, so
# this times the machinery (a k+1-row verify pass and k head steps a token).
# As run (build 88fbc2a), treespec's `bench` with no --drafter asked for the default target's
# drafter and failed; tq.sh ran its half with `--drafter mtp`. From 6e2afee on, `bench` picks
# the target's own head unasked and this script runs whole.
source benchmarks/gpu/lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /root/llama && tar -xJf .stage/llama.tar.xz -C /root/llama
(cd /root/llama && setsid nohup bash -c "cmake -S . -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DCMAKE_BUILD_TYPE=Release && cmake --build build --target llama-bench llama-speculative-simple -j12 \
  && touch /root/llama/done" > /root/llama/build.log 2>&1 < /dev/null &)
stage_synth q27; wait; echo "synth at ${SECONDS}s"
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
printf '{"prompt": "%s", "category": "writing"}\n' "$P" > $S/one.jsonl
tsp() {
  timeout 120 $B bench --device cuda --target $S/q27.gguf --prompts $S/one.jsonl --max-tokens 128 \
    --modes ar,mtp:1@0,mtp:3@0 --require-identical > $OUT/treespec-$1.md 2>&1
  echo "treespec $1 rc=$? at ${SECONDS}s"; grep "^| ar \|^| mtp" $OUT/treespec-$1.md | cut -d'|' -f2-5
}
tsp before
# The DFlash check (x1.sh's commands) while llama.cpp builds.
zcat benchmarks/train-data/code.jsonl.gz | head -32 > $S/code32.jsonl
[ -f $S/s15.gguf ] || $B synth --shape qwen2.5-1.5b --tokenizer-from $S/tok.gguf --out $S/s15.gguf > /dev/null
rm -rf $S/dx $S/dx.json $S/dx.data.json
( time timeout 150 $B train-drafter --device cuda --target $S/s15.gguf --out $S/dx --dflash 2x16 \
  --dflash-from-target --data $S/code32.jsonl --answer-tokens 64 --steps 20 --batch-tokens 8192 \
  --seed 1 ) > $OUT/train.log 2>&1
echo "dflash train rc=$? at ${SECONDS}s"; tail -c 400 $OUT/train.log | tr '\r' '\n' | tail -5
timeout 90 $B bench --device cuda --target $S/s15.gguf --drafter $S/dx --limit 2 --max-tokens 32 \
  --prompts benchmarks/prompts/humaneval.jsonl --modes ar,linear:15,tree --require-identical > $OUT/bench-x1.md 2>&1
echo "dflash bench rc=$? at ${SECONDS}s"; grep "^| " $OUT/bench-x1.md | head -6
cp $S/dx.json $OUT/ 2>/dev/null
while [ ! -f /root/llama/done ] && [ $SECONDS -lt 450 ]; do sleep 5; done
echo "llama.cpp at ${SECONDS}s: $(ls /root/llama/build/bin/ | tr '\n' ' ')"; tail -2 /root/llama/build.log | cut -c1-150
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/root/llama/build/bin
L=/root/llama/build/bin
echo "llama-bench: $(timeout 60 $L/llama-bench -m $S/q27.gguf -ngl 99 -p 0 -n 128 -r 3 -o md 2>&1 | grep tg128)"
for n in 1 3; do
  timeout 60 $L/llama-speculative-simple -m $S/q27.gguf -ngl 99 --spec-type draft-mtp --spec-draft-n-max $n \
    -p "$P" -n 128 --temp 0 -c 2048 > $OUT/llama-mtp$n.log 2>&1
  echo "llama.cpp draft-mtp n=$n rc=$?: $(grep -h 'decoded\|accept ' $OUT/llama-mtp$n.log | sed 's/^.* I //' | tr '\n' ' ')"
done
tsp after
