# The drafter assembled; then m5's benches (selftest done in m5).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
S=/root/stage; B=$S/treespec; T=$S/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
D=$S/qwen2.5-coder-0.5b-instruct-awq.gguf; H=$S/h2/head-q4k.gguf
[ -f $D ] || { cat $S/p/drafter.part* > $D && rm -f $S/p/drafter.part*; }; ls -la $D
L=${LIMIT:-8}
timeout 200 $B bench --device cuda --target $T --drafter $D --head $H --limit $L --max-tokens 128 \
  --modes ar,linear,tree,mtp:3@0,mtp:3,auto --json $OUT/all-modes.json > $OUT/all-modes.log 2>&1 || tail -20 $OUT/all-modes.log
sed -n '/^settings:/,$p' $OUT/all-modes.log | grep -v "^| ---\|^$" | cut -c1-175
timeout 80 $B bench --device cuda --target $T --drafter $D --head none --limit $L --max-tokens 128 \
  --modes ar,auto > $OUT/auto-no-head.log 2>&1 || tail -20 $OUT/auto-no-head.log
sed -n '/^settings:/,$p' $OUT/auto-no-head.log | grep -v "^| ---\|^$" | cut -c1-175
