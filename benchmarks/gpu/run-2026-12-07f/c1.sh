#!/usr/bin/env bash
# Session 35, call 1 (carry [".stage/bin/treespec.xz", ".stage/tok/tokenizer.gguf.xz"]; heads/ in
# the work tree): the binary, tokenizer and shipped head to the stage, then
# ../run-2026-12-07d/x1.sh's DFlash check (synthetic 1.5B target, 20 steps, then `bench
# --require-identical`) started detached, so that it runs while the real target is staged
# (sp.sh, one part a call, which prints its progress). Its logs come back with d1.
source benchmarks/gpu/lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cp heads/*.gguf $S/ && ls $S
zcat benchmarks/train-data/code.jsonl.gz | head -32 > $S/code32.jsonl
cp benchmarks/prompts/humaneval.jsonl $S/
cat > $S/x1.sh <<EOS
cd $S
[ -f s15.gguf ] || ./treespec synth --shape qwen2.5-1.5b --tokenizer-from tok.gguf --out s15.gguf > /dev/null
echo "synth at \$SECONDS s"
rm -rf dx dx.json dx.data.json
timeout 240 ./treespec train-drafter --device cuda --target s15.gguf --out dx --dflash 2x16 \
  --dflash-from-target --data code32.jsonl --answer-tokens 64 --steps 20 --batch-tokens 8192 --seed 1 > train.log 2>&1
echo "train rc=\$? at \$SECONDS s"
timeout 120 ./treespec bench --device cuda --target s15.gguf --drafter dx --limit 2 --max-tokens 32 \
  --prompts humaneval.jsonl --modes ar,linear:15,tree --require-identical > bench-x1.md 2>&1
echo "bench rc=\$? at \$SECONDS s"
EOS
cd $S && (TREESPEC_CACHE=$S/cache setsid nohup bash x1.sh > x1.log 2>&1 < /dev/null &)
sleep 5; cat $S/x1.log
