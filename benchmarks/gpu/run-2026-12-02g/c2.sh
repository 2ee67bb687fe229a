#!/usr/bin/env bash
# Session 16, call 2: ncu's sections on the exact path's two big kernels at 256 rows (synthetic
# 1.5B after 256 tokens): the first three mmtc_q4_k_t8 launches (q/k/v, o, gate/up of layer 0)
# and the first attention_chunk_f32.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
[ -x $S/treespec ] || (gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec)
B=$S/treespec
for shape in qwen2.5-1.5b qwen2.5-0.5b; do
  [ -f $S/synth-$shape.gguf ] || $B synth --shape $shape --out $S/synth-$shape.gguf > /dev/null 2>&1
done
T=$S/synth-qwen2.5-1.5b.gguf; D=$S/synth-qwen2.5-0.5b.gguf
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
SECS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy --section SchedulerStats --section InstructionStats"
for k in mmtc_q4_k_t8:3 attention_chunk_f32:1 mmtc_q4_k_row:3; do
  name=${k%:*}; c=${k#*:}; r=256; [ $name = mmtc_q4_k_row ] && r=1
  TREESPEC_PROFILE_ROWS=$r timeout 200 $NCU --profile-from-start off $SECS -k regex:$name -c $c \
    $B bench --device cuda --costs --target $T --drafter $D --cost-rows $r > $OUT/sec-$name.txt 2>&1
  echo "== $name rc=$?"; grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Issue Slots Busy|Achieved Occupancy|Grid Size|Block Size|Registers Per|No Eligible" $OUT/sec-$name.txt | head -40
done
