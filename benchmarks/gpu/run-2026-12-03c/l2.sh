#!/usr/bin/env bash
# Session 19, call 4: plain decoding, treespec against llama.cpp on the same GPU and file (the
# default target, Qwen2.5-Coder-1.5B-Instruct Q4_K_M), interleaved: llama-bench tg256 (3 runs),
# treespec generate 256 tokens x3 with attention chunks by count (auto) and of 128, llama-bench again.
S=/root/stage
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
B=$S/treespec
[ -f $S/t.gguf ] || cat $(ls $S/p/t.* | sort -V) > $S/t.gguf
sha256sum $S/t.gguf | cut -c1-16
while [ ! -f /root/llama/done ]; do sleep 5; [ $SECONDS -gt 400 ] && { tail -5 /root/llama/build.log; exit 1; }; done
echo "llama.cpp built; waited ${SECONDS}s"
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/root/llama/build/bin
prompt="Write a Python function that checks whether a number is prime."
rate() { sed -n 's/.*decode [0-9]* tokens at \([0-9.]*\) tok\/s.*/\1/p'; }
lb() { /root/llama/build/bin/llama-bench -m $S/t.gguf -ngl 99 -p 0 -n 256 -r 3 -o md 2>&1 | grep tg256 | awk -F'|' '{print $(NF-1)}'; }
ts() { r=""; for i in 1 2 3; do r="$r $(TREESPEC_ATT_CHUNK=$1 $B generate --device cuda -m $S/t.gguf -p "$prompt" --max-tokens 256 2>&1 >/dev/null | rate)"; done; echo "$r"; }
{
echo "| run | tok/s |"; echo "| --- | --- |"
echo "| llama-bench tg256 (1) | $(lb) |"
echo "| treespec ar, chunks by count | $(ts auto) |"
echo "| treespec ar, chunks of 128 | $(ts 128) |"
echo "| llama-bench tg256 (2) | $(lb) |"
echo "| treespec ar, chunks by count | $(ts auto) |"
echo "| treespec ar, chunks of 128 | $(ts 128) |"
} | tee $OUT/ar-vs-llama.md
