#!/bin/bash
# As run.sh, the drafter's layer started as the target's last layer (--dflash-from-target); the data of run.sh reused (d1.data.json copied to d2.data.json).
B=target/debug/treespec; M=/root/.cache/treespec/models/SmolLM2-135M-Instruct.Q4_1.gguf
date
$B train-drafter --device cpu -m $M --dflash 1x8 --dflash-from-target --self-prompts 96 --answer-tokens 96 --lr 1e-3 --lr-schedule constant --steps 150 --batch-tokens 2048 --seed 1 --out /tmp/dfl/d2 > /tmp/dfl/d2.log 2>&1
echo rc=$?
date
