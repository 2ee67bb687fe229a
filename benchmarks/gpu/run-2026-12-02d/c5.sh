#!/usr/bin/env bash
# Session 13, call 5: the final build on the real target with the shipped head as the drafter:
# mtp chain lengths 1-4 side by side (issue 12's chat figure), auto, and `= ar` with the prompt's
# passes through cuBLAS (verify passes on the quantised kernels, the default).
S=/root/stage
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
B=$S/treespec
[ -f $S/t.gguf ] || cat $S/p/t.* > $S/t.gguf
sha256sum $S/t.gguf | cut -c1-16
H=$S/qwen2.5-coder-1.5b-instruct-mtp-head-q4_k.gguf
cd /root
timeout 500 $B bench --device cuda --target $S/t.gguf --drafter $H --limit ${LIMIT:-20} --max-tokens 128 \
  --modes ${MODES:-ar,mtp:1,mtp:2,mtp:3,mtp:4,mtp:2@0,auto} --json $OUT/bench-mtp.json > $OUT/bench-mtp.log 2>&1
sed -n '/^settings:/,$p' $OUT/bench-mtp.log | grep -v "^$" | awk -F'|' 'NF<5{print; next}{print $2,"|",$3,"|",$4,"|",$5,"|",$8,"|",$10,"|",$13}'
gzip -k $OUT/bench-mtp.json
