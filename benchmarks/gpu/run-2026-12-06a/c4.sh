#!/usr/bin/env bash
# Session 23, call 4: call 3's kernel checks failed differently run to run (top-k, attention) with
# Xid 31 MMU faults: a race or a bad read. Without programmatic dependent launches, and with every
# launch synchronous.
S=/root/stage
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
[ -x $S/treespec ] || { mkdir -p $S; xz -dc .stage/bin/treespec.xz > $S/treespec && chmod +x $S/treespec; }
i=0
for v in "TREESPEC_PDL=0" "TREESPEC_PDL=0" "CUDA_LAUNCH_BLOCKING=1" "TREESPEC_GPU_STEP=1"; do
  i=$((i+1)); env $v timeout 90 $S/treespec selftest --device cuda > $OUT/st$i.txt 2>&1
  echo "selftest [$v] rc=$?: $(grep -c . $OUT/st$i.txt) lines; $(grep -i 'error' $OUT/st$i.txt | head -2 | cut -c1-200)"
done
dmesg 2>/dev/null | grep -i xid | tail -2 | cut -c1-160
