#!/usr/bin/env bash
# Session 30, call 1 (carry [".stage/bin/treespec.xz", ".stage/tok"]): session 29's
# `c4.sh` (the 27B's 64-row pass with the unchecked tree kernels `gdn_tree*_full`, the selftests,
# every mode = `ar`), then plain decoding on the 8B- and 27B-shaped files (`generate --mode ar`,
# 128 tokens, interleaved): the default products, the K-quant family (`TREESPEC_MMQ=1`) with its new
# one-row kernel `mmq_<fmt>_warp`, and with the old one (`TREESPEC_MMQ_WARP=0`); llama.cpp beside it is `c2.sh` (the repository and its
# tarball together pass the 64 MiB a call may carry). The binary: release build of the commit after 80b6325
# (a chain's recurrence launches reserve no saved-state slots; `mmq_<fmt>_warp`).
nvidia-smi --query-gpu=name --format=csv,noheader
source benchmarks/gpu/lib.sh
stage_synth q08 q27 q8b; wait; echo "synth at ${SECONDS}s"
TREESPEC_MMQ=1 timeout 100 $B selftest --device cuda -m $S/q08.gguf > $OUT/selftest-q08.txt 2>&1
echo "selftest q08 rc=$? at ${SECONDS}s: $(tail -1 $OUT/selftest-q08.txt | cut -c1-100)"; grep -i "gated\|differ\|error" $OUT/selftest-q08.txt | cut -c1-200 | head -6
timeout 100 $B selftest --device cuda -m $S/q08.gguf --head mtp > $OUT/selftest-head.txt 2>&1
echo "head rc=$?"; grep "^mtp:" $OUT/selftest-head.txt | cut -c1-220; tail -2 $OUT/selftest-head.txt | cut -c1-200
timeout 90 $B bench --device cuda --target $S/q27.gguf --drafter $S/q08.gguf --modes ar,linear,tree:16x4,mtp --limit 1 --max-tokens 24 --require-identical > $OUT/identical27.md 2>&1
echo "identical rc=$? at ${SECONDS}s: $(grep -i "every mode\|differ" $OUT/identical27.md | head -2)"
TREESPEC_MMQ=1 timeout 60 $B bench --device cuda --costs --target $S/q27.gguf --drafter $S/q08.gguf --cost-rows 1,8,64 > $OUT/costs27.md 2>&1
echo "costs rc=$? at ${SECONDS}s"; grep "target verify pass\|target decode step" $OUT/costs27.md | cut -c1-110
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
gen() {
  env $2 timeout 70 $B generate --device cuda -m $S/$1.gguf --mode ar -p "$P" --max-tokens 128 > $OUT/gen.txt 2>$OUT/g.err
  echo "generate $1 [$2] rc=$? at ${SECONDS}s: $(tail -1 $OUT/g.err | sed 's/.*\] //')"
}
for m in q8b q27; do
  for v in X=1 TREESPEC_MMQ=1 "TREESPEC_MMQ=1 TREESPEC_MMQ_WARP=0" X=1 TREESPEC_MMQ=1; do gen $m "$v"; done
done
