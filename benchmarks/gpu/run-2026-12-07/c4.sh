#!/usr/bin/env bash
# Call 4 (carry [".stage/bin/treespec.xz", ".stage/tok"]): the runtime's tree kernels without
# bound checks where key heads are 128 wide (`gdn_tree{cols}_full`; the lab's `tree16 full`, 25-30%
# faster, bit for bit): the selftest on the 0.8B hybrid, every mode = `ar` on the 27B shape, the
# 27B's passes and where a 64-row pass goes, stage by stage; the hybrid's own MTP head (a gated
# attention block) through the head's GPU step against candle's ops (`selftest --head mtp`).
source benchmarks/gpu/lib.sh
stage_synth q08 q27; wait
TREESPEC_MMQ=1 timeout 100 $B selftest --device cuda -m $S/q08.gguf > $OUT/selftest-q08.txt 2>&1
echo "selftest q08 rc=$?: $(tail -1 $OUT/selftest-q08.txt | cut -c1-100)"; grep -i "gated\|differ\|error" $OUT/selftest-q08.txt | cut -c1-200 | head -6
timeout 100 $B selftest --device cuda -m $S/q08.gguf --head mtp > $OUT/selftest-head.txt 2>&1
echo "head rc=$?"; grep "^mtp:" $OUT/selftest-head.txt | cut -c1-220; tail -2 $OUT/selftest-head.txt | cut -c1-200
timeout 90 $B bench --device cuda --target $S/q27.gguf --drafter $S/q08.gguf --modes ar,tree:16x4,mtp --limit 1 --max-tokens 24 --require-identical > $OUT/identical27.md 2>&1
echo "identical rc=$? at ${SECONDS}s: $(grep -i "every mode\|differ" $OUT/identical27.md | head -2)"
TREESPEC_MMQ=1 timeout 60 $B bench --device cuda --costs --target $S/q27.gguf --drafter $S/q08.gguf --cost-rows 1,64 > $OUT/costs27.md 2>&1
grep "target verify pass\|target decode step" $OUT/costs27.md | cut -c1-110
