#!/bin/bash
# A/B on SmolLM2-135M-Instruct (this CPU, 2 cores): the same 160 self-written prompts and seed,
# one turn (a) against two (b: each conversation followed up by the target and answered again,
# a sequence a turn), the same 120 optimiser steps of k = 1; the evaluation sets' answers made
# once (a's) and copied to b. Debug-profile binary (optimised).
B=target/debug/treespec; M=/root/.cache/treespec/models/SmolLM2-135M-Instruct.Q4_1.gguf
COMMON="--device cpu -m $M --self-prompts 160 --answer-tokens 96 --k 1 --draft-vocab 8192 --lr 1e-3 --lr-schedule constant --steps 120 --batch-tokens 2048 --eval --seed 1"
date
$B train-drafter $COMMON --out /tmp/tab/a/head.safetensors > /tmp/tab/a/train.log 2>&1
date
cp /tmp/tab/a/head.safetensors.eval.json /tmp/tab/b/
$B train-drafter $COMMON --turns 2 --out /tmp/tab/b/head.safetensors > /tmp/tab/b/train.log 2>&1
date
echo finished
# As run: b's data were written in the thirty-first session (ab/b-data.log), the process then cut
# off by a restart at step 0; the thirty-second session ran b's command again (ab/b.log), which
# read the data file back and trained the 120 steps.
