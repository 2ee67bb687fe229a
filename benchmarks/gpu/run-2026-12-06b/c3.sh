#!/usr/bin/env bash
# Session 24, call 3: after call 2 (the hybrid step correct, 62.6 tok/s against llama-bench's
# 84.4): the convolution and the output quantiser spread over many blocks (one block a row was
# latency-bound). The checks again, then `generate` in `ar` with the step, candle's ops and
# TREESPEC_TENSOR_CORES=0, and an Nsight Systems kernel summary of the step where nsys exists.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
nvidia-smi --query-gpu=name --format=csv,noheader
xz -dc .stage/bin/treespec.xz > $S/treespec && chmod +x $S/treespec
xz -dc .stage/tok/tokenizer.gguf.xz > $S/tok.gguf
B=$S/treespec; T=$S/q27.gguf; D=$S/q08.gguf
[ -f $T ] || $B synth --shape qwen3.6-27b --tokenizer-from $S/tok.gguf --out $T > /dev/null 2>&1 &
[ -f $D ] || $B synth --shape qwen3.5-0.8b --tokenizer-from $S/tok.gguf --out $D > /dev/null 2>&1
timeout 90 $B selftest --device cuda -m $D > $OUT/selftest08.txt 2>&1
echo "selftest -m 0.8B rc=$? at ${SECONDS}s"; grep -i 'error\|step\|every kernel' $OUT/selftest08.txt | grep -v '^device' | tail -9 | cut -c1-250
wait; echo "synth at ${SECONDS}s"
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
for v in "TREESPEC_GPU_STEP=1" "TREESPEC_GPU_STEP=0" "TREESPEC_TENSOR_CORES=0"; do
  env $v timeout 100 $B generate --device cuda -m $T --mode ar -p "$P" --max-tokens 128 > $OUT/gen-$v.txt 2>$OUT/gen-$v.err
  echo "generate [$v] rc=$? at ${SECONDS}s: $(tail -1 $OUT/gen-$v.err | sed 's/.*\] //')"
done
# Every mode through the hybrid step (tree verify, kept paths folded) must emit exactly ar's tokens.
timeout 150 $B bench --device cuda --target $T --drafter $D --modes ar,linear,tree:16x4,mtp --limit 1 \
  --max-tokens 32 --require-identical > $OUT/modes27.md 2>&1
echo "modes rc=$? at ${SECONDS}s"; grep -v '^$' $OUT/modes27.md | tail -8 | cut -c1-200
NS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NS:-none}"
if [ -n "$NS" ]; then
  TREESPEC_CUDA_GRAPHS=0 timeout 150 $NS profile -o $S/prof --force-overwrite true -t cuda \
    $B generate --device cuda -m $T --mode ar -p "$P" --max-tokens 24 > /dev/null 2>&1
  timeout 60 $NS stats -r cuda_gpu_kern_sum -f csv -o $OUT/kern $S/prof.nsys-rep > /dev/null 2>&1
  ls $OUT; head -25 $OUT/kern*.csv | cut -c1-180
fi
