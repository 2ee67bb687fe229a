#!/usr/bin/env bash
# Session 31, call 6 (carry [".stage/bin/treespec.xz", ".stage/tok"]; a fresh machine; the session's
# last ~400 device seconds): `c5.sh` cut to what checks the unverified commits. The binary: release
# build of main at 30702ce + the step constructor split (+ train-only changes): the family's row
# kernels through the shared `group_term` helper (selftest, bit for bit), the family as the hybrid
# models' default (every mode = `ar` on the 27B shape with no switch set), then plain decoding on the
# 27B-shaped file: the tensor-core family (`TREESPEC_MMQ=0`), the new default, and the two other
# one-row layouts (`TREESPEC_MMQ_WARP=c` / `4`).
nvidia-smi --query-gpu=name --format=csv,noheader
source benchmarks/gpu/lib.sh
stage_synth q08 q27
while [ ! -f $S/q08.gguf ] || pgrep -f "out $S/q08.gguf" > /dev/null; do sleep 1; done
TREESPEC_MMQ=1 timeout 80 $B selftest --device cuda -m $S/q08.gguf > $OUT/selftest-q08.txt 2>&1
echo "selftest q08 rc=$? at ${SECONDS}s: $(tail -1 $OUT/selftest-q08.txt | cut -c1-100)"; grep -i "differ\|error\|mismatch" $OUT/selftest-q08.txt | cut -c1-160 | head -8
wait; echo "synth at ${SECONDS}s"
timeout 80 $B bench --device cuda --target $S/q27.gguf --drafter $S/q08.gguf --modes ar,mtp,tree:16x4 --limit 1 --max-tokens 24 --require-identical > $OUT/identical27.md 2>&1
echo "identical (no switch: the family is the hybrids' default) rc=$? at ${SECONDS}s: $(grep -i "every mode\|differ" $OUT/identical27.md | head -2)"
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
gen() {
  env $2 timeout 40 $B generate --device cuda -m $S/$1.gguf --mode ar -p "$P" --max-tokens 128 > $OUT/gen.txt 2>$OUT/g.err
  echo "generate $1 [$2] rc=$? at ${SECONDS}s: $(tail -1 $OUT/g.err | sed 's/.*decode //')"
}
for v in TREESPEC_MMQ=0 X=1 TREESPEC_MMQ_WARP=c TREESPEC_MMQ_WARP=4 X=1 TREESPEC_MMQ=0; do
  [ $SECONDS -lt 250 ] && gen q27 "$v"
done
