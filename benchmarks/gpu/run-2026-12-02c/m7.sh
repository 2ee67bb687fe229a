# Trees over the new head (the head as the only drafter), tau against the chain at depth 4.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
S=/root/stage; B=$S/treespec; T=$S/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf; H=$S/h2/head-q4k.gguf
timeout 170 $B bench --device cuda --target $T --drafter $H --limit ${LIMIT:-6} --max-tokens 128 \
  --modes ar,mtp:4@0,tree:8x4@0,tree:8x4w2@0,tree:32x4w4@0 > $OUT/head-trees.log 2>&1 || tail -5 $OUT/head-trees.log
sed -n '/^settings:/,$p' $OUT/head-trees.log | grep -v "^| ---\|^$" | cut -c1-175
