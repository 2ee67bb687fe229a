#!/usr/bin/env bash
# For the next lease (issues 36 and 38; not run yet), after ../run-2026-12-07c/s1.sh and 20 x
# sp.sh have staged the binary, the shipped head and the real 1.5B target: BENCHMARKS 52's
# projection checked end to end. (1) This build's products for a target that verifies (the
# K-quant family) against `mmtc` (TREESPEC_MMQ=0) on `mtp` k=3, in consecutive runs: predicted
# ~4-5% for `mtp` on chat. (2) Trees over the shipped head that fill one 8-row tile (budget 7)
# beside the 9-row ones and the chain: predicted on chat 1.43-1.48x `ar` against the chain's
# 1.33x. 16 prompts of each bundled set, 128 tokens, greedy, every mode required to be ar's.
source benchmarks/gpu/lib.sh
T=$S/t.gguf; H0=$S/qwen2.5-coder-1.5b-instruct-mtp-head-q4_k.gguf
[ -f $T ] || { cat $(ls $S/p/t.* | sort -V) > $T && rm -rf $S/p; }
sha256sum $T | cut -c1-16   # cc324af070c2ecbf
P="benchmarks/prompts/chat.jsonl benchmarks/prompts/heldout.jsonl benchmarks/prompts/humaneval.jsonl benchmarks/prompts/gsm8k.jsonl"
for mmq in "" 0; do
  TREESPEC_MMQ=$mmq timeout 200 $B bench --device cuda --target $T --drafter $H0 --limit 16 --max-tokens 128 \
    --prompts $P --modes ar,mtp:3 --require-identical > $OUT/mtp-mmq$mmq.md 2>&1
  echo "== TREESPEC_MMQ=$mmq rc=$? at ${SECONDS}s"; grep "^###\|^| ar\|^| mtp" $OUT/mtp-mmq$mmq.md
done
timeout 280 $B bench --device cuda --target $T --drafter $H0 --limit 16 --max-tokens 128 --prompts $P \
  --modes ar,mtp:3,tree:7x4@0,tree:7x4w2@0,tree:8x4@0 --require-identical --json $OUT/trees.json > $OUT/trees.md 2>&1
echo "== trees rc=$? at ${SECONDS}s"; grep "^###\|^| " $OUT/trees.md | cut -d'|' -f2-5
