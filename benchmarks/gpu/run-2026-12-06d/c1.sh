#!/usr/bin/env bash
# Session 26, call 1: the selftest after session 25's house split (loader, attention launcher,
# Gated DeltaNet launches, stacked products, the step's whole-model check), on the 0.8B hybrid and
# a dense 0.5B-shaped file; then on the 27B-shaped hybrid: every mode (the target's own MTP head
# now drafting `mtp` beside a named drafter) against `ar` with --require-identical, and the verify
# passes of the default products beside the K-quant family (TREESPEC_MMQ=1).
source benchmarks/gpu/lib.sh
T=$S/q27.gguf; D=$S/q08.gguf
nvidia-smi --query-gpu=name --format=csv,noheader
$B synth --shape qwen3.6-27b --tokenizer-from $S/tok.gguf --out $T > /dev/null 2>&1 &
$B synth --shape qwen3.5-0.8b --tokenizer-from $S/tok.gguf --out $D > /dev/null 2>&1
$B synth --shape qwen2.5-0.5b --out $S/q05.gguf > /dev/null 2>&1
for m in q08 q05; do
  timeout 100 $B selftest --device cuda -m $S/$m.gguf > $OUT/selftest-$m.txt 2>&1
  echo "selftest $m rc=$? at ${SECONDS}s: $(tail -1 $OUT/selftest-$m.txt | cut -c1-100)"
  grep -i "step vs\|compaction\|row pass\|differ\|error:" $OUT/selftest-$m.txt | cut -c1-160
done
wait
echo "synth done at ${SECONDS}s"
timeout 150 $B bench --device cuda --target $T --drafter $D --modes ar,linear,tree:16x4,mtp --limit 1 --max-tokens 32 --require-identical > $OUT/modes27.md 2>&1; echo "modes rc=$? at ${SECONDS}s"; grep -v '^$' $OUT/modes27.md | tail -7 | cut -c1-200
for v in 0 1; do
  TREESPEC_MMQ=$v timeout 120 $B bench --device cuda --costs --target $T --drafter $D --cost-rows 1,4,8,64 > $OUT/costs27-mmq$v.md 2>&1; echo "costs mmq=$v rc=$? at ${SECONDS}s"; grep -v '^$' $OUT/costs27-mmq$v.md | head -10 | cut -c1-160
done
