#!/bin/bash
# DFlash on SmolLM2-135M (this CPU): one layer, blocks of 8, 96 self-written prompts.
B=target/debug/treespec; M=/root/.cache/treespec/models/SmolLM2-135M-Instruct.Q4_1.gguf
date
$B train-drafter --device cpu -m $M --dflash 1x8 --self-prompts 96 --answer-tokens 96 --lr 1e-3 --lr-schedule constant --steps 150 --batch-tokens 2048 --seed 1 --out /tmp/dfl/d1 > /tmp/dfl/d1.log 2>&1
echo rc=$?
date
# Then, with the drafter it wrote (bench.md):
# target/debug/treespec bench --device cpu --target $M --drafter /tmp/dfl/d1 --limit 3 --max-tokens 48 \
#   --prompts benchmarks/prompts/chat.jsonl benchmarks/prompts/humaneval.jsonl --modes ar,linear:7,tree --require-identical
