#!/usr/bin/env bash
# Call 5 (carry [".stage/bin/treespec.xz", ".stage/tok"]): c4.sh cut to the 0.8B hybrid, for a
# session with little device time left: the selftest (the tree kernels without bound checks run
# every 128-wide walk), the hybrid's own MTP head through the head's GPU step against candle's
# ops, and `mtp` = `ar` with it.
source benchmarks/gpu/lib.sh
stage_synth q08; wait
TREESPEC_MMQ=1 timeout 100 $B selftest --device cuda -m $S/q08.gguf > $OUT/selftest-q08.txt 2>&1
echo "selftest q08 rc=$?: $(tail -1 $OUT/selftest-q08.txt | cut -c1-100)"; grep -i "gated\|differ\|error" $OUT/selftest-q08.txt | cut -c1-200 | head -6
timeout 100 $B selftest --device cuda -m $S/q08.gguf --head mtp > $OUT/selftest-head.txt 2>&1
echo "head rc=$?"; grep "^mtp:" $OUT/selftest-head.txt | cut -c1-220; tail -2 $OUT/selftest-head.txt | cut -c1-200
timeout 60 $B bench --device cuda --target $S/q08.gguf --drafter mtp --modes ar,mtp,mtp:4 --limit 2 --max-tokens 48 --require-identical > $OUT/identical08.md 2>&1
echo "identical rc=$?: $(grep -i "every mode\|differ" $OUT/identical08.md | head -2)"; grep "^| ar\|^| mtp" $OUT/identical08.md | head -8
TREESPEC_MTP_GPU_STEP=0 timeout 60 $B bench --device cuda --target $S/q08.gguf --drafter mtp --modes ar,mtp,mtp:4 --limit 2 --max-tokens 48 > $OUT/candle08.md 2>&1
echo "candle ops:"; grep "^| ar\|^| mtp" $OUT/candle08.md | head -8
