#!/usr/bin/env bash
# On the H200 machine: the cost table and the modes side by side on the default pair.
# Expects the binary and the two GGUF files in /root/stage (staged in parts, see
# ../shared/device/README.md). Writes JSON and logs under $OUT; prints the tables last.
set -euo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
S=/root/stage
B="$S/treespec"
T="$S/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
D="$S/qwen2.5-coder-0.5b-instruct-awq.gguf"
P=/root/stage/prompts

nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
[ "${COSTS:-1}" = 0 ] || "$B" bench --device cuda --costs --target "$T" --drafter "$D" 2>&1 | tee "$OUT/gpu-costs.md" | tail -30
"$B" bench --device cuda --target "$T" --drafter "$D" \
  --prompts "$P/humaneval.jsonl" "$P/gsm8k.jsonl" "$P/chat.jsonl" --limit "${LIMIT:-8}" --max-tokens 128 \
  --modes "${MODES:-ar,linear:4,linear:8@0.4,tree:8x8@0.4,tree:32x6@0,tree:32x6w4@0,tree:64x8w8@0,linear:6@0}" \
  --json "$OUT/gpu-modes.json" > "$OUT/gpu-modes.log" 2>&1 || { tail -40 "$OUT/gpu-modes.log"; exit 1; }
sed -n '/^settings:/,$p' "$OUT/gpu-modes.log"
