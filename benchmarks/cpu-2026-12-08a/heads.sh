#!/usr/bin/env bash
# Session 35 (issue 38, item 4; BENCHMARKS.md section 52): chains and trees over the shipped MTP
# head on the real default target, on this CPU, for their acceptance (tau does not depend on the
# device: greedy, every output exactly `ar`'s). The speeds in heads.md are not comparable (the
# run shared the two cores with builds and was paused during device calls). T: the real
# Qwen2.5-Coder-1.5B-Instruct Q4_K_M (../shared/models).
T=${T:-/tmp/cmp/t15.gguf}
treespec bench --target $T --drafter heads/qwen2.5-coder-1.5b-instruct-mtp-head-q4_k.gguf \
  --prompts benchmarks/prompts/chat.jsonl benchmarks/prompts/heldout.jsonl --limit 16 --max-tokens 128 \
  --modes ar,mtp:3,mtp:3@0,mtp:4@0,tree:4x4@0,tree:8x4@0,tree:8x4w2@0,tree:16x4@0,tree:16x4w4@0 \
  --require-identical --json heads.json > heads.md 2>&1
# Then the 8-row trees (a budget of 7: the root and 7 nodes fill one 8-row tile): b7.md.
treespec bench --target $T --drafter heads/qwen2.5-coder-1.5b-instruct-mtp-head-q4_k.gguf \
  --prompts benchmarks/prompts/chat.jsonl benchmarks/prompts/heldout.jsonl --limit 16 --max-tokens 128 \
  --modes ar,tree:7x4@0,tree:7x4w2@0 --require-identical --json b7.json > b7.md 2>&1
