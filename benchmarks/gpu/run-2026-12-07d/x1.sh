#!/usr/bin/env bash
# Session 33's last try for a device (issue 38): the DFlash trainer's GPU path on a synthetic
# Qwen2.5-1.5B-shaped target (random weights, the real tokenizer; no staging of the real
# target): 32 code prompts answered (64 tokens), a 2x16 drafter from the target's last layers,
# 20 steps, timed; then the drafter in `bench` on that target, every mode required to be ar's.
# Carry [".stage/bin/treespec.xz", ".stage/tok/tokenizer.gguf.xz"].
source benchmarks/gpu/lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f $S/s15.gguf ] || $B synth --shape qwen2.5-1.5b --tokenizer-from $S/tok.gguf --out $S/s15.gguf > /dev/null
echo "synth at ${SECONDS}s"
zcat benchmarks/train-data/code.jsonl.gz | head -32 > $S/code32.jsonl
rm -rf $S/dx $S/dx.json $S/dx.data.json
( time timeout 240 $B train-drafter --device cuda --target $S/s15.gguf --out $S/dx --dflash 2x16 \
  --dflash-from-target --data $S/code32.jsonl --answer-tokens 64 --steps 20 --batch-tokens 8192 \
  --seed 1 ) > $OUT/train.log 2>&1
echo "train rc=$? at ${SECONDS}s"; tail -6 $OUT/train.log
timeout 120 $B bench --device cuda --target $S/s15.gguf --drafter $S/dx --limit 2 --max-tokens 32 \
  --prompts benchmarks/prompts/humaneval.jsonl --modes ar,linear:15,tree --require-identical > $OUT/bench.md 2>&1
echo "bench rc=$? at ${SECONDS}s"; grep "^| " $OUT/bench.md | head -6
cp $S/dx.json $OUT/ 2>/dev/null
