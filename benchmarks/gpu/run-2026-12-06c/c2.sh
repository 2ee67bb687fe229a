#!/usr/bin/env bash
# Session 25, call 2 (same machine as c1.sh, llama.cpp built): plain decoding side by side on the
# 27B-shaped hybrid and the 8B-shaped dense file: treespec `generate --mode ar` with the
# warp-a-row one-row kernel (default), without it (TREESPEC_MMTC_WARP=0: `_row_long`) and with the
# dp4a products (TREESPEC_TENSOR_CORES=0), two rounds interleaved; llama-bench tg128 on both files;
# then the 27B's verify passes (`bench --costs`, 1, 8, 16, 64 rows).
S=/root/stage
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
B=$S/treespec; T=$S/q27.gguf; D=$S/q08.gguf; T8=$S/q8b.gguf
nvidia-smi --query-gpu=name --format=csv,noheader
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
for r in 1 2; do for m in q27 q8b; do for v in TREESPEC_MMTC_WARP=1 TREESPEC_MMTC_WARP=0 TREESPEC_TENSOR_CORES=0; do
  env $v timeout 60 $B generate --device cuda -m $S/$m.gguf --mode ar -p "$P" --max-tokens 128 > $OUT/gen.txt 2>$OUT/g.err
  echo "generate $m [$v] run $r rc=$? at ${SECONDS}s: $(tail -1 $OUT/g.err | sed 's/.*\] //')"
done; done; done
while [ ! -f /root/llama/done ] && [ $SECONDS -lt 200 ]; do sleep 5; done
for m in q27 q8b; do
  timeout 100 /root/llama/build/bin/llama-bench -m $S/$m.gguf -ngl 99 -p 0 -n 128 -r 3 -o md > $OUT/llama-bench-$m.md 2>&1
  echo "llama-bench $m rc=$? at ${SECONDS}s: $(grep tg128 $OUT/llama-bench-$m.md)"
done
timeout 200 $B bench --device cuda --costs --target $T --drafter $D --cost-rows 1,8,16,64 > $OUT/costs27.md 2>&1
echo "costs rc=$? at ${SECONDS}s"; grep -v '^$' $OUT/costs27.md | tail -10
