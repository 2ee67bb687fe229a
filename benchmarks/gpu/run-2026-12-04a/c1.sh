#!/usr/bin/env bash
# Session 20, call 1 (issue 36): the K-quant product family of one summation contract
# (kernels/mmq.cu) against the build before it (12a471a, `base`). The kernels' selftest (every
# mmq kernel bit for bit the contract's CPU reference), the step's check on the synthetic 1.5B,
# the products' timings, v(n) on the 1.5B and the 8B shape for both builds interleaved, and every
# mode's exactness on the synthetic pair.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
for b in treespec base; do gunzip -c .stage/bin/$b.gz > $S/$b && chmod +x $S/$b; done
B=$S/treespec; A=$S/base
for shape in qwen2.5-1.5b qwen2.5-0.5b qwen3-8b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1 &
done; wait
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf; T8=$S/synth-qwen3-8b.gguf
echo "synth done at ${SECONDS}s"; nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
timeout 90 $B selftest --device cuda > $OUT/selftest.txt 2>&1; echo "selftest rc=$? at ${SECONDS}s"; grep -i "product q\|error\|differ\|stacked product" $OUT/selftest.txt | cut -c1-220; tail -1 $OUT/selftest.txt | cut -c1-300
timeout 120 $B selftest --device cuda -m $T > $OUT/selftest-m.txt 2>&1; echo "selftest -m rc=$? at ${SECONDS}s"; grep -i "GPU step vs\|pass (\|error\|invariant" $OUT/selftest-m.txt | cut -c1-250
timeout 120 $B bench --device cuda --products > $OUT/products.md 2>&1; echo "products rc=$? at ${SECONDS}s"; grep "^| 8B\|^| 1.5B" $OUT/products.md | awk -F'|' '{print $2,$4,$5,$6,$7}' | tr -s ' ' | paste -sd';' | fold -w 2000
for run in new base new2 base2; do
  case $run in base*) X=$A;; *) X=$B;; esac
  timeout 60 $X bench --device cuda --costs --target $T --drafter $D --cost-rows 1,4,8,16,64,256 > $OUT/costs15-$run.md 2>&1
  echo "== 1.5B $run rc=$? at ${SECONDS}s"; grep "verify\|decode step (1" $OUT/costs15-$run.md | awk -F'|' '{print $3, $4}' | tr '\n' ';'; echo
done
for run in new base; do
  case $run in base*) X=$A;; *) X=$B;; esac
  timeout 100 $X bench --device cuda --costs --target $T8 --drafter $D --cost-rows 1,8,16,64,256 > $OUT/costs8-$run.md 2>&1
  echo "== 8B $run rc=$? at ${SECONDS}s"; grep "verify\|decode step (1" $OUT/costs8-$run.md | awk -F'|' '{print $3, $4}' | tr '\n' ';'; echo
done
timeout 90 $B bench --device cuda --target $T --drafter $D --limit 2 --max-tokens 48 \
  --modes ar,linear,tree,tree:32x8,tree:64x8 > $OUT/bench-synth.log 2>&1
echo "bench rc=$? at ${SECONDS}s"; tail -3 $OUT/bench-synth.log
