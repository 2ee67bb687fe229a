#!/usr/bin/env bash
# For a later session, after d1.sh: wait for the DFlash run (until ~WAIT s), then the drafter
# beside the shipped head on the real target: ar, the head's chain (mtp k=3), the DFlash
# drafter's chain (linear:15, a whole block) and trees over its blocks, 16 prompts of each bundled set, 128
# tokens, greedy, every mode required to be ar's. The best checkpoint by held-out walked tau
# (dflash.best/, f40af28 on) is benched where there is one. The drafter (f32, hundreds of MB)
# stays on the machine; its records and log come back.
source benchmarks/gpu/lib.sh
T=$S/t.gguf; H0=$S/qwen2.5-coder-1.5b-instruct-mtp-head-q4_k.gguf; D=$S/dflash
while [ $SECONDS -lt ${WAIT:-240} ] && pgrep -f train-drafter > /dev/null; do sleep 10; done
pkill -f train-drafter; sleep 2; grep -v "after" $S/dflash.log | cut -c1-300 | tail -6
[ -f $D.best/model.safetensors ] && D=$D.best
timeout 300 $B bench --device cuda --target $T --drafter $D --head $H0 --limit 16 --max-tokens 128 \
  --prompts benchmarks/prompts/chat.jsonl benchmarks/prompts/heldout.jsonl benchmarks/prompts/humaneval.jsonl benchmarks/prompts/gsm8k.jsonl \
  --modes ar,mtp:3,linear:15,tree,tree:32x15 --require-identical --json $OUT/bench-dflash.json > $OUT/bench-dflash.md 2>&1
echo "rc=$? at ${SECONDS}s"; grep "^###\|^| " $OUT/bench-dflash.md | head -40
cp $S/dflash.json $S/dflash.best.json $S/dflash.log $OUT/ 2>/dev/null
