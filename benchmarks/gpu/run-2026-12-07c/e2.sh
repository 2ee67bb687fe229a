#!/usr/bin/env bash
# For the next session, after e1.sh: wait for the run (until ~WAIT s), export its best checkpoint
# (Q4_K, as shipped) and run it beside the shipped head on the real target (as g2.sh, each head
# given as --drafter alone), 16 prompts of each bundled set, 128 tokens, greedy, every mode
# required to be ar's; the head back in 15 MiB parts with its record and log.
source benchmarks/gpu/lib.sh
T=$S/t.gguf; H0=$S/qwen2.5-coder-1.5b-instruct-mtp-head-q4_k.gguf; D=$S/e3
while [ $SECONDS -lt ${WAIT:-240} ] && pgrep -f train-drafter > /dev/null; do sleep 10; done
pkill -f train-drafter; sleep 2; grep -v "after" $D/train.log | cut -c1-400 | tail -8
H=$D/head.safetensors.best.safetensors
$B export-head --head $H --data $D/head.safetensors.data.json --draft-vocab 32768 -m $T --type q4_k \
  --out $S/e3-head.gguf 2>&1 | tail -1
[ "${BENCH:-1}" = 1 ] && for h in ${HEADS:-$H0 $S/e3-head.gguf}; do
  n=$(basename $h .gguf)
  timeout 200 $B bench --device cuda --target $T --drafter $h --limit 16 --max-tokens 128 \
    --prompts benchmarks/prompts/chat.jsonl benchmarks/prompts/heldout.jsonl benchmarks/prompts/humaneval.jsonl benchmarks/prompts/gsm8k.jsonl \
    --modes ar,mtp:3,tree:8x4@0 --require-identical --json $OUT/bench-$n.json > $OUT/bench-$n.md 2>&1
  echo "== $n rc=$? at ${SECONDS}s"; grep "^###\|^| mtp\|^| tree" $OUT/bench-$n.md
done
split -b 15M -d $S/e3-head.gguf $OUT/e3-head.gguf.part
cp $H.json $D/head.safetensors.json $D/train.log $OUT/
