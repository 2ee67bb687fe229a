#!/usr/bin/env bash
# Plain decoding on this CPU (2 cores), treespec's AVX-512 and AVX2 kernel paths beside
# llama-bench, alternated ROUNDS times, on each file of FILES: 64 tokens of one prompt greedy
# (treespec `bench --modes ar`, decode steps only; llama-bench `-p 0 -n 64 -t 2 -r 1`, tg64).
T=${T:-target/release/treespec}; L=${L:-/tmp/llx/build/bin}
printf '{"prompt": "Write a short poem about the sea.", "category": "writing"}\n' > /tmp/cmp/one.jsonl
for r in $(seq ${ROUNDS:-3}); do
  for m in ${FILES:-/tmp/cmp/q08.gguf /tmp/cmp/t15.gguf}; do
    n=$(basename $m .gguf)
    echo "$n round $r llama-bench $($L/llama-bench -m $m -p 0 -n 64 -t 2 -r 1 2>&1 | grep tg64 | awk -F'|' '{print $(NF-1)}')"
    for p in avx512 avx2; do
      echo "$n round $r treespec $p $(TREESPEC_CPU_KERNELS=$p $T bench --device cpu --target $m \
        --prompts /tmp/cmp/one.jsonl --max-tokens 64 --modes ar 2>&1 | grep '^| ar ' | cut -d'|' -f3)"
    done
  done
done
