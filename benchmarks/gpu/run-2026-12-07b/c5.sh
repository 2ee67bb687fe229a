#!/usr/bin/env bash
# Session 30, call 5 (carry [".stage/bin/treespec.xz", ".stage/tok"]; a fresh machine): the K-quant
# family's one-row kernels side by side. The binary has three (`mmq_<fmt>_warp`: a lane group a
# chunk, two super-blocks in flight; `_warp4`: four; `_warpc`: lanes over neighbouring units, the
# terms folded by every lane) beside the old `mmq_<fmt>_row`. The selftest checks each bit for bit;
# `bench --products` times them beside the tensor-core family's one-row kernels on the same
# shapes; every mode = `ar` on the 27B shape with the family now the hybrids' default; `generate
# --mode ar` on the 27B-shaped file with each beside the tensor-core family (`TREESPEC_MMQ=0`)
# (cut to fit the session's last device minutes).
nvidia-smi --query-gpu=name --format=csv,noheader
source benchmarks/gpu/lib.sh
stage_synth q08 q27
while [ ! -f $S/q08.gguf ] || pgrep -f "out $S/q08.gguf" > /dev/null; do sleep 1; done
TREESPEC_MMQ=1 timeout 100 $B selftest --device cuda -m $S/q08.gguf > $OUT/selftest-q08.txt 2>&1
echo "selftest q08 rc=$? at ${SECONDS}s: $(tail -1 $OUT/selftest-q08.txt | cut -c1-100)"; grep -i "differ\|error\|product q" $OUT/selftest-q08.txt | cut -c1-160 | head -8
timeout 150 $B bench --products --device cuda > $OUT/products.md 2>&1
echo "products rc=$? at ${SECONDS}s"; grep -E "\| 1 \|" $OUT/products.md | grep -E "27B|8B" | cut -c1-150
wait; echo "synth at ${SECONDS}s"
timeout 90 $B bench --device cuda --target $S/q27.gguf --drafter $S/q08.gguf --modes ar,mtp,tree:16x4 --limit 1 --max-tokens 24 --require-identical > $OUT/identical27.md 2>&1
echo "identical (K-quant family, now the hybrids' default) rc=$? at ${SECONDS}s: $(grep -i "every mode\|differ\|products" $OUT/identical27.md | head -3)"
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
gen() {
  env $2 timeout 70 $B generate --device cuda -m $S/$1.gguf --mode ar -p "$P" --max-tokens 128 > $OUT/gen.txt 2>$OUT/g.err
  echo "generate $1 [$2] rc=$? at ${SECONDS}s: $(tail -1 $OUT/g.err | sed 's/.*decode //')"
}
for v in TREESPEC_MMQ=0 X=1 TREESPEC_MMQ_WARP=c TREESPEC_MMQ_WARP=4; do
  [ $SECONDS -lt 300 ] && gen q27 "$v"
done
