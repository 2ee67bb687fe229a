# Assemble the target; kernels checked (the multi-row dp4a products among them), products timed,
# ar and mtp with and without the multi-row kernels; then training from head-j starts.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
S=/root/stage; B=$S/treespec; T=$S/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
[ -f $T ] || { cat $S/p/target.part* > $T && rm -f $S/p/target.part*; }
ls -la $T
mkdir -p $S/head && cat .stage/head-j/head.gguf.* > $S/hj.gguf
$B selftest --device cuda -m $T --head $S/hj.gguf > $OUT/selftest.txt 2>&1; tail -4 $OUT/selftest.txt; grep -i "differ\|error\|tensor-core" $OUT/selftest.txt | head
$B bench --device cuda --products > $OUT/products.md 2>&1; cat $OUT/products.md
i=0
for r in 1 0 1 0; do
  i=$((i+1)); echo "TREESPEC_MMTC_ROWS=$r"
  TREESPEC_MMTC_ROWS=$r $B bench --device cuda --target $T --drafter $S/hj.gguf --limit 4 --max-tokens 128 \
    --modes ar,mtp:3@0,mtp:4@0 > $OUT/rows$r-$i.log 2>&1 || tail -5 $OUT/rows$r-$i.log
  sed -n '/^settings:/,$p' $OUT/rows$r-$i.log | grep -v "^| ---\|^$" | cut -c1-175
done
