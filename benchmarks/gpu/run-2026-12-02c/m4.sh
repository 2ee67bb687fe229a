# Training ends (waits WAIT seconds for it, then stops it); the head, its record, log and the
# generated answers come back (Q8_0 in 15 MB parts).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
S=/root/stage; B=$S/treespec; T=$S/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
for i in $(seq 1 ${WAIT:-300}); do [ -f $S/h2/finished ] && break; sleep 1; done
pkill -f "treespec train-drafter" && echo "stopped before the end" && sleep 3
grep -v "^step [0-9]*: loss" $S/h2/train.log | grep -v "^profile" | tail -5 | cut -c1-500
tail -5 $S/h2/train.log | cut -c1-300
gzip -c $S/h2/train.log > $OUT/train.log.gz
$B export-head -m $T --head $S/h2/head.safetensors --out $S/h2/head.gguf 2>&1 | tail -1
rm -f /tmp/head.gguf.*; split -b 15M -d -a 2 $S/h2/head.gguf /tmp/head.gguf.
cp /tmp/head.gguf.* $S/h2/head.safetensors.json $OUT/
[ -f $S/gen/gen.data.json.gz ] && cp $S/gen/gen.data.json.gz $OUT/
$B export-head -m $T --head $S/h2/head.safetensors --out $S/h2/head-q4k.gguf --type q4_k 2>&1 | tail -1
ls -la $OUT
