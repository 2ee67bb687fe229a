#!/bin/bash
# Two-turn training data on SmolLM2-135M-Instruct (this CPU, 2 cores): 32 self-written prompts,
# each answered, followed up by the target as the user and answered again; the evaluation sets
# picked with their categories taking turns. No training (--steps 0): the data and the step-0
# record only. Debug-profile binary (optimised, as the repository's dev profile is).
M=/root/.cache/treespec/models/SmolLM2-135M-Instruct.Q4_1.gguf
time target/debug/treespec train-drafter --device cpu -m $M --self-prompts 32 --turns 2 \
  --answer-tokens 96 --k 1 --steps 0 --eval --seed 1 --out /tmp/turns/t2/head.safetensors
