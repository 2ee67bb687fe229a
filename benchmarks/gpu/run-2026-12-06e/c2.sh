#!/usr/bin/env bash
# Session 27, call 2: the K-quant tile kernels rewritten (weights through shared memory with the
# activations, three stages, eight warps a block for tiles of 32-64 rows, one MMA a Q4_K
# sub-block) and the Gated DeltaNet walk over parents in shared memory, against the build before
# (treespec-old, HEAD 69736a8) in the same call: selftests, verify-pass costs at the 8B and 27B
# shapes (TREESPEC_MMQ=1), the tile kernels alone (mmq-lab) with 2, 4 and 8 warps a block.
source benchmarks/gpu/lib.sh
O=$S/treespec-old  # unpacked by c2a.sh, which also makes the models
for i in $(seq 1 150); do [ -f $S/q8b.gguf ] && [ -f $S/q05t.gguf ] && [ -f $S/q27.gguf ] && [ -f $S/q08.gguf ] && break; sleep 1; done
echo "models at ${SECONDS}s: $(ls $S | tr '\n' ' ')"
TREESPEC_MMQ=1 timeout 120 $B selftest --device cuda -m $S/q08.gguf > $OUT/selftest-q08.txt 2>&1
echo "selftest q08 rc=$? at ${SECONDS}s: $(tail -1 $OUT/selftest-q08.txt | cut -c1-100)"
grep -i "product q\|row pass\|gated deltanet \[1\|differ\|error" $OUT/selftest-q08.txt | cut -c1-220 | head -12
TREESPEC_MMQ=1 timeout 120 $B selftest --device cuda -m $S/q8b.gguf > /tmp/st8b.txt 2>&1
echo "selftest 8B rc=$? $(grep 'row pass' /tmp/st8b.txt | cut -c1-120) $(tail -1 /tmp/st8b.txt)"
export TREESPEC_MMQ=1
for r in 1 2; do for b in $O $B; do
  timeout 120 $b bench --device cuda --costs --target $S/q8b.gguf --drafter $S/q05t.gguf --cost-rows 1,8,16,64,256 > /tmp/c.md 2>&1
  echo "8B $(basename $b) r$r rc=$?: $(grep 'verify pass\|decode step (1 row + LM head + argmax)' /tmp/c.md | awk -F'|' '{printf "%s:%s/%s ", $3, $4, $5}')"
  cat /tmp/c.md >> $OUT/costs8b.md
done; done
for b in $O $B; do
  timeout 100 $b bench --device cuda --costs --target $S/q27.gguf --drafter $S/q08.gguf --cost-rows 1,4,8,16,64 > /tmp/c.md 2>&1
  echo "27B $(basename $b) rc=$?: $(grep 'verify pass\|decode step (1 row + LM head + argmax)' /tmp/c.md | awk -F'|' '{printf "%s:%s/%s ", $3, $4, $5}')"
  cat /tmp/c.md >> $OUT/costs27.md
done
TREESPEC_PROFILE=1 TREESPEC_CUDA_GRAPHS=0 timeout 60 $B bench --device cuda --costs --target $S/q27.gguf --drafter $S/q08.gguf --cost-rows 1,64 > /dev/null 2> $OUT/profile27.txt
grep "64 rows" $OUT/profile27.txt | grep -v " 0.0 ms" | cut -c1-100
timeout 60 $B bench --device cuda --target $S/q27.gguf --drafter $S/q08.gguf --modes ar,linear,tree:16x4,mtp --limit 1 --max-tokens 24 --require-identical > /tmp/m.md 2>&1
echo "modes27 rc=$? $(grep -i 'every mode\|differ' /tmp/m.md | head -2)"
echo "== lab at ${SECONDS}s"
export PATH=/usr/local/cuda-13.0/bin:$PATH
nvcc -arch=sm_90 -O3 -I kernels -o /tmp/lab benchmarks/gpu/mmq-lab/lab.cu -lcuda 2>&1 | head -5
for shape in "24576 4096 q4_k" "4096 12288 q6_k" "34816 5120 q4_k"; do
  timeout 60 /tmp/lab $shape 8 16 32 64 128 256 >> $OUT/lab.md 2>&1
done
echo "lab done at ${SECONDS}s"; awk -F'|' '$3+0==64 || $3+0==16' $OUT/lab.md | cut -c1-80 | head -30
