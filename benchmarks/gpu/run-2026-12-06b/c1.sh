#!/usr/bin/env bash
# Session 24, call 1: treespec's side of issue 37 at the 27B shape, as it runs today (candle's ops
# around the Gated DeltaNet kernels; the fused step does not take hybrids yet): the selftest, the
# cost of a step and of 8/64-row verify passes, and `generate` in `ar`.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
xz -dc .stage/bin/treespec.xz > $S/treespec && chmod +x $S/treespec
xz -dc .stage/tok/tokenizer.gguf.xz > $S/tok.gguf
B=$S/treespec; T=$S/q27.gguf; D=$S/q08.gguf
$B synth --shape qwen3.6-27b --tokenizer-from $S/tok.gguf --out $T > $OUT/synth27.txt 2>&1 &
$B synth --shape qwen3.5-0.8b --tokenizer-from $S/tok.gguf --out $D > $OUT/synth08.txt 2>&1 &
timeout 90 $B selftest --device cuda > $OUT/selftest.txt 2>&1
echo "selftest rc=$? at ${SECONDS}s"; grep -ci 'error\|differ' $OUT/selftest.txt; tail -2 $OUT/selftest.txt | cut -c1-200
wait; echo "synth done at ${SECONDS}s"; ls -la $T $D
timeout 200 $B bench --device cuda --costs --target $T --drafter $D --cost-rows 1,8,64 > $OUT/costs27.md 2>&1
echo "costs rc=$? at ${SECONDS}s"; grep -v '^$' $OUT/costs27.md | tail -12
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
timeout 120 $B generate --device cuda -m $T --mode ar -p "$P" --max-tokens 64 > $OUT/gen27.txt 2>$OUT/gen27.err
echo "generate rc=$? at ${SECONDS}s"; tail -3 $OUT/gen27.err
