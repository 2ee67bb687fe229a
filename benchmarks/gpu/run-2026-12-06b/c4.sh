#!/usr/bin/env bash
# Session 24, call 4 (same machine as call 3, right after l1.sh): the side-by-side of issue 37 at
# the 27B shape: treespec `generate` in `ar` (default products; TREESPEC_TENSOR_CORES=0, the dp4a
# one-row kernels), every mode exactly ar's through the hybrid step, llama-bench on the same file.
S=/root/stage
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
B=$S/treespec; T=$S/q27.gguf; D=$S/q08.gguf
ls -la $T $D | cut -c1-120
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
for r in 1 2; do for v in TC_DEFAULT=1 TREESPEC_TENSOR_CORES=0; do
  env $v timeout 60 $B generate --device cuda -m $T --mode ar -p "$P" --max-tokens 128 > $OUT/gen.txt 2>$OUT/gen$r-${v%%=*}.err
  echo "generate [$v] run $r rc=$? at ${SECONDS}s: $(tail -1 $OUT/gen$r-${v%%=*}.err | sed 's/.*\] //')"
done; done
timeout 120 $B bench --device cuda --target $T --drafter $D --modes ar,linear,tree:16x4 --limit 1 \
  --max-tokens 32 --require-identical > $OUT/modes27.md 2>&1
echo "modes rc=$? at ${SECONDS}s"; grep -v '^$' $OUT/modes27.md | tail -8 | cut -c1-200
while [ ! -f /root/llama/done ] && [ $SECONDS -lt 330 ]; do sleep 5; done
echo "llama build at ${SECONDS}s: $(ls /root/llama/done 2>&1)"
timeout 100 /root/llama/build/bin/llama-bench -m $T -ngl 99 -p 0 -n 128 -r 3 -o md > $OUT/llama-bench27.md 2>&1
echo "llama-bench rc=$? at ${SECONDS}s"; grep 'tg128' $OUT/llama-bench27.md
TREESPEC_TENSOR_CORES=0 timeout 60 $B generate --device cuda -m $T --mode ar -p "$P" --max-tokens 128 > $OUT/gen.txt 2>$OUT/gen3-TC0.err
echo "generate [TC=0] after llama-bench: $(tail -1 $OUT/gen3-TC0.err | sed 's/.*\] //')"
