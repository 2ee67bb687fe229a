#!/usr/bin/env bash
# Session 35 (issue 38's tree bar, issue 36's products; no staging; carry
# [".stage/bin/treespec.xz", ".stage/tok/tokenizer.gguf.xz"], tests/data moved aside): the 1.5B
# target's verify passes at the row counts of chains and small trees over the MTP head
# (k + 1 = 2..5 rows, B + 1 = 5..33), on a synthetic Qwen2.5-1.5B-shaped file (the real formats,
# random weights: a pass's cost does not depend on the weights' values), with the dense default's
# products and with the K-quant family (TREESPEC_MMQ=1). The head's acceptance is device-free and
# measured on the CPU with the real target; the two make the projection of BENCHMARKS 52.
source benchmarks/gpu/lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f $S/s15.gguf ] || $B synth --shape qwen2.5-1.5b --tokenizer-from $S/tok.gguf --out $S/s15.gguf > /dev/null
echo "synth at ${SECONDS}s"
R=1,2,3,4,5,6,8,9,12,16,17,24,32,33,64
for mmq in 0 1 0 1; do
  TREESPEC_MMQ=$mmq timeout 100 $B bench --device cuda --costs --target $S/s15.gguf --drafter $S/s15.gguf \
    --cost-rows $R > $OUT/costs-mmq$mmq-$SECONDS.md 2>&1
  echo "== TREESPEC_MMQ=$mmq rc=$? at ${SECONDS}s"; grep "^| target" $OUT/costs-mmq$mmq-*.md | tail -16 | cut -d'|' -f3-5 | tr '\n' ';'; echo
done
