#!/usr/bin/env bash
# Session 32, call "g2": wait for the training run (until ~WAIT s), export the head (Q4_K, as
# shipped), and run the shipped head and the new one side by side on the real target: ar, the
# head's chain (mtp k=3) and a tree over the head (tree:8x4@0, the head as the only drafter),
# 16 prompts of each bundled set, 128 tokens, greedy, every mode required to be ar's.
source benchmarks/gpu/lib.sh
T=$S/t.gguf; H0=$S/qwen2.5-coder-1.5b-instruct-mtp-head-q4_k.gguf; D=$S/head
while [ $SECONDS -lt ${WAIT:-240} ] && pgrep -f train-drafter > /dev/null; do sleep 10; done
echo "at ${SECONDS}s running: $(pgrep -f train-drafter | wc -l)"; grep -v "after" $D/train.log | cut -c1-400 | tail -6
pkill -f train-drafter; sleep 2
$B export-head --head $D/head.safetensors --data $D/head.safetensors.data.json --draft-vocab 32768 \
  -m $T --type q4_k --out $S/new-head.gguf 2>&1 | tail -2
for h in $H0 $S/new-head.gguf; do
  n=$(basename $h .gguf)
  timeout 200 $B bench --device cuda --target $T --drafter $h --head $h --limit 16 --max-tokens 128 \
    --prompts benchmarks/prompts/chat.jsonl benchmarks/prompts/heldout.jsonl benchmarks/prompts/humaneval.jsonl benchmarks/prompts/gsm8k.jsonl \
    --modes ar,mtp:3,tree:8x4@0 --require-identical --json $OUT/bench-$n.json > $OUT/bench-$n.md 2>&1
  echo "== $n rc=$? at ${SECONDS}s"; tail -14 $OUT/bench-$n.md
done
split -b 15M -d $S/new-head.gguf $OUT/new-head.gguf.part
cp $D/head.safetensors.json $D/train.log $OUT/; xz -T8 -c $D/head.safetensors.data.json > $OUT/data.json.xz; ls -la $OUT
# As run, the new head's bench failed ("the engine already drafts `mtp` with new-head.gguf":
# --head and --drafter named the same file); it was run again in the next call with --drafter
# alone (`bench ... --drafter $S/new-head.gguf --modes ar,mtp:3,tree:8x4@0`, same prompts).
