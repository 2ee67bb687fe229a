#!/usr/bin/env bash
# Not run in session 26 (its device time ran out): the next session's first call.
# `gdn_recur_staged` (TREESPEC_GDN_STAGED=1: a block's rows' q, k, v and gates staged in shared
# memory eight at a time, no barrier between rows, the same per-row arithmetic) against
# `gdn_recur`: the selftest on the 0.8B hybrid with each (the kernels against the host
# recurrence; chains against one-row steps and tree paths bit for bit); the 27B's passes with both
# and the stage clock of the K-quant family's 64-row pass (call 3: 0.574 ms a layer); every mode
# against `ar` with the staged kernel.
source benchmarks/gpu/lib.sh
T=$S/q27.gguf; D=$S/q08.gguf
$B synth --shape qwen3.6-27b --tokenizer-from $S/tok.gguf --out $T > /dev/null 2>&1 &
$B synth --shape qwen3.5-0.8b --tokenizer-from $S/tok.gguf --out $D > /dev/null 2>&1
for g in 0 1; do
  TREESPEC_GDN_STAGED=$g timeout 100 $B selftest --device cuda -m $D > $OUT/selftest-q08-staged$g.txt 2>&1
  echo "selftest q08 staged=$g rc=$? at ${SECONDS}s: $(tail -1 $OUT/selftest-q08-staged$g.txt | cut -c1-100)"
  grep -i "gated deltanet\|row pass\|differ\|error" $OUT/selftest-q08-staged$g.txt | cut -c1-200 | head -12
done
wait; echo "synth at ${SECONDS}s"
export TREESPEC_GDN_STAGED=1
for v in 0 1; do
  TREESPEC_MMQ=$v timeout 60 $B bench --device cuda --costs --target $T --drafter $D --cost-rows 1,4,8,64 > $OUT/costs27-mmq$v.md 2>&1
  echo "costs mmq=$v rc=$? at ${SECONDS}s"; grep 'verify pass\|decode step' $OUT/costs27-mmq$v.md | head -5 | cut -c1-120
done
TREESPEC_MMQ=1 TREESPEC_PROFILE=1 TREESPEC_CUDA_GRAPHS=0 timeout 60 $B bench --device cuda --costs --target $T --drafter $D \
  --cost-rows 1,64 > $OUT/costs27-mmq-profile.md 2> $OUT/profile27-mmq.txt
echo "profile rc=$? at ${SECONDS}s"; grep 'gdn conv' $OUT/profile27-mmq.txt | cut -c1-120
timeout 60 $B bench --device cuda --target $T --drafter $D --modes ar,linear,tree:16x4,mtp --limit 1 --max-tokens 24 --require-identical > $OUT/modes27.md 2>&1
echo "modes rc=$? at ${SECONDS}s"; grep -i "every mode\|differ" $OUT/modes27.md | head -3
