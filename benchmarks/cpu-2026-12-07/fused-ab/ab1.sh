#!/bin/bash
# A/B on SmolLM2-135M (this CPU), k = 1: step-1 prediction, where the target's features enter.
B=/tmp/fab/treespec-cpu; M=/root/.cache/treespec/models/SmolLM2-135M-Instruct.Q4_1.gguf
COMMON="--device cpu -m $M --self-prompts 320 --answer-tokens 96 --k 1 --draft-vocab 8192 --lr 1e-3 --lr-schedule constant --steps 120 --batch-tokens 2048 --eval --seed 1"
date
$B train-drafter $COMMON --out /tmp/fab/a1/head.safetensors > /tmp/fab/a1/train.log 2>&1
date
$B train-drafter $COMMON --feature-layers eagle3 --out /tmp/fab/b1/head.safetensors > /tmp/fab/b1/train.log 2>&1
date
echo finished
