#!/usr/bin/env bash
# Session 24, call 2: the GPU step learns the hybrid layers (Gated DeltaNet, gated attention).
# llama.cpp builds detached meanwhile (l1.sh of run-2026-12-06a, the call before). Then: the kernel selftest; the
# step checked on the synthetic Qwen3.5-0.8B-shaped hybrid against the CPU decoder and against
# itself (batch invariance, a tree's kept path folded); at the 27B shape the costs and `generate`
# in `ar` with the step and with candle's ops (TREESPEC_GPU_STEP=0), and llama-bench, same file.
# (run benchmarks/gpu/run-2026-12-06a/l1.sh first, on the same machine: the carry limit keeps them apart)
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
xz -dc .stage/bin/treespec.xz > $S/treespec && chmod +x $S/treespec
xz -dc .stage/tok/tokenizer.gguf.xz > $S/tok.gguf
B=$S/treespec; T=$S/q27.gguf; D=$S/q08.gguf
$B synth --shape qwen3.6-27b --tokenizer-from $S/tok.gguf --out $T > $OUT/synth27.txt 2>&1 &
$B synth --shape qwen3.5-0.8b --tokenizer-from $S/tok.gguf --out $D > $OUT/synth08.txt 2>&1
timeout 90 $B selftest --device cuda > $OUT/selftest.txt 2>&1
echo "selftest rc=$? at ${SECONDS}s: $(grep -ci 'error\|differ' $OUT/selftest.txt) error lines"; tail -2 $OUT/selftest.txt | cut -c1-200
timeout 120 $B selftest --device cuda -m $D > $OUT/selftest08.txt 2>&1
echo "selftest -m 0.8B rc=$? at ${SECONDS}s"; grep -v '^device' $OUT/selftest08.txt | tail -8 | cut -c1-300
wait; echo "synth done at ${SECONDS}s"; ls -la $T
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
for v in 1 0; do
  TREESPEC_GPU_STEP=$v timeout 150 $B generate --device cuda -m $T --mode ar -p "$P" --max-tokens 128 > $OUT/gen27-step$v.txt 2>$OUT/gen27-step$v.err
  echo "generate step=$v rc=$? at ${SECONDS}s: $(tail -1 $OUT/gen27-step$v.err | cut -c1-300)"
done
cmp -s $OUT/gen27-step1.txt $OUT/gen27-step0.txt && echo "same text both ways" || echo "texts differ"
timeout 150 $B bench --device cuda --costs --target $T --drafter $D --cost-rows 1,8,64 > $OUT/costs27.md 2>&1
echo "costs rc=$? at ${SECONDS}s"; grep -v '^$' $OUT/costs27.md | tail -10 | cut -c1-200
while [ ! -f /root/llama/done ] && [ $SECONDS -lt 480 ]; do sleep 5; done
echo "llama build at ${SECONDS}s: $(ls /root/llama/done 2>&1)"
timeout 100 /root/llama/build/bin/llama-bench -m $T -ngl 99 -p 0 -n 128 -r 2 -o md > $OUT/llama-bench27.md 2>&1
echo "llama-bench rc=$? at ${SECONDS}s"; grep 'tg128' $OUT/llama-bench27.md
