#!/bin/bash
# Section 49: the next GPU run's path on this CPU (SmolLM2-135M-Instruct): section 47's one-turn
# head a (benchmarks/cpu-2026-12-07b/turns/ab.sh, 120 steps) exported and trained on for 40 more
# steps on its own data (copied, with its evaluation answers), fed four fused layers (eagle3) or
# the last layer alone. Debug-profile binary (optimised).
B=target/debug/treespec; M=/root/.cache/treespec/models/SmolLM2-135M-Instruct.Q4_1.gguf
$B export-head --head /tmp/tab/a/head.safetensors -m $M --type f32 --out /tmp/e3/a.gguf
COMMON="--device cpu -m $M --init /tmp/e3/a.gguf --self-prompts 160 --answer-tokens 96 --k 1 --draft-vocab 8192 --lr 1e-3 --lr-schedule constant --steps 40 --batch-tokens 2048 --eval --seed 1"
for x in f c; do mkdir -p /tmp/e3/$x; cp /tmp/tab/a/head.safetensors.data.json /tmp/tab/a/head.safetensors.eval.json /tmp/e3/$x/; done
$B train-drafter $COMMON --feature-layers eagle3 --out /tmp/e3/f/head.safetensors > /tmp/e3/f/train.log 2>&1
$B export-head --head /tmp/e3/f/head.safetensors.best.safetensors --data /tmp/e3/f/head.safetensors.data.json --draft-vocab 8192 -m $M --type q8_0 --out /tmp/e3/fbest.gguf
$B train-drafter $COMMON --out /tmp/e3/c/head.safetensors > /tmp/e3/c/train.log 2>&1
