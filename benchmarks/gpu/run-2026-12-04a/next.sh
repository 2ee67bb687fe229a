#!/usr/bin/env bash
# Written in session 20 for the next session's first call (the device was paused after call 2):
# one binary carries both tensor-core families, so they are compared in one run: the default
# (kernels/mmtc.cu) against TREESPEC_MMQ=1 (the K-quant family of one summation contract,
# kernels/mmq.cu), and with every mmq pass on the tiles (TREESPEC_MMQ_ROWS=0). First the
# selftest (every mmq kernel bit for bit the contract's CPU reference; mmtc's own checks) and the
# step's check on the synthetic 1.5B with MMQ=1, then the products' timings, v(n) on the 1.5B and
# the 8B shape interleaved, every mode's exactness on the synthetic pair both ways.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
B=$S/treespec
for shape in qwen2.5-1.5b qwen2.5-0.5b qwen3-8b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1 &
done; wait
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf; T8=$S/synth-qwen3-8b.gguf
echo "synth done at ${SECONDS}s"
timeout 90 $B selftest --device cuda > $OUT/selftest.txt 2>&1; echo "selftest rc=$? at ${SECONDS}s"; grep -i "product q\|error\|differ" $OUT/selftest.txt | cut -c1-200; tail -1 $OUT/selftest.txt
TREESPEC_MMQ=1 timeout 120 $B selftest --device cuda -m $T > $OUT/selftest-m.txt 2>&1; echo "selftest -m rc=$? at ${SECONDS}s"; grep -i "GPU step vs\|pass (\|error\|invariant" $OUT/selftest-m.txt | cut -c1-200
timeout 120 $B bench --device cuda --products > $OUT/products.md 2>&1; echo "products rc=$? at ${SECONDS}s"
run() {  # $1: label, $2: target, $3: rows
  case $1 in *mmq*) M=1; R=;; *tiles*) M=1; R=0;; *) M=; R=;; esac
  TREESPEC_MMQ=$M TREESPEC_MMQ_ROWS=$R timeout 100 $B bench --device cuda --costs --target $2 --drafter $D --cost-rows $3 > $OUT/costs-$1.md 2>&1
  echo "== $1 rc=$? at ${SECONDS}s"; grep "verify\|decode step (1" $OUT/costs-$1.md | awk -F'|' '{print $3, $4}' | tr '\n' ';'; echo
}
for l in mmtc mmq tiles mmtc2 mmq2; do run 15-$l $T 1,2,4,8,16,64,256; done
for l in mmtc mmq tiles; do run 8-$l $T8 1,2,4,8,16,64,256; done
for M in "" 1; do
  TREESPEC_MMQ=$M timeout 90 $B bench --device cuda --target $T --drafter $D --limit 2 --max-tokens 48 \
    --modes ar,linear,tree,tree:32x8,tree:64x8 > $OUT/bench-synth$M.log 2>&1
  echo "bench MMQ=$M rc=$? at ${SECONDS}s"; tail -1 $OUT/bench-synth$M.log
done
