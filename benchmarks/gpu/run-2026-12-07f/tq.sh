#!/usr/bin/env bash
# m2.sh's treespec half again, with `--drafter mtp` (m2's bench asked for the default drafter,
# which the machine cannot fetch): the 27B-shaped hybrid, ar and chains over its own MTP block.
source benchmarks/gpu/lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
stage_synth q27; wait; echo "synth at ${SECONDS}s"
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
printf '{"prompt": "%s", "category": "writing"}\n' "$P" > $S/one.jsonl
for r in 1 2; do
  timeout 120 $B bench --device cuda --target $S/q27.gguf --drafter mtp --prompts $S/one.jsonl --max-tokens 128 \
    --modes ar,mtp:1@0,mtp:3@0 --require-identical > $OUT/treespec-$r.md 2>&1
  echo "treespec $r rc=$? at ${SECONDS}s"; grep "^| ar \|^| mtp" $OUT/treespec-$r.md | cut -d'|' -f2-5; tail -1 $OUT/treespec-$r.md
done
