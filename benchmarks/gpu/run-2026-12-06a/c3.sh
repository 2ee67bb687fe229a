#!/usr/bin/env bash
# Session 23, call 3: call 2's selftest failed on the attention check and every later process failed
# at loading the attention kernels (illegal address). Is it this build or that machine? The kernel
# checks twice on a fresh machine, with attention over one warp a head, and with the GPU's state.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
xz -dc .stage/bin/treespec.xz > $S/treespec && chmod +x $S/treespec
nvidia-smi --query-gpu=name,driver_version,ecc.errors.uncorrected.volatile.total,clocks.sm --format=csv,noheader
for v in "" "TREESPEC_ATT_SPLIT=1" ""; do
  env $v timeout 60 $S/treespec selftest --device cuda > $OUT/selftest$v.txt 2>&1
  echo "selftest [$v] rc=$?: $(grep -c . $OUT/selftest$v.txt) lines; $(grep -i 'error' $OUT/selftest$v.txt | head -2 | cut -c1-200)"
done
$S/treespec synth --shape qwen2.5-0.5b --out $S/q05.gguf > /dev/null 2>&1
timeout 90 $S/treespec selftest --device cuda -m $S/q05.gguf > $OUT/selftest-m.txt 2>&1
echo "selftest -m rc=$?"; grep -i 'error\|GPU step vs\|invariant' $OUT/selftest-m.txt | head -6 | cut -c1-200
dmesg 2>/dev/null | grep -i xid | tail -3
