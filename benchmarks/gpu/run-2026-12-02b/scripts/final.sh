# Training ends (waits WAIT seconds for it to finish by itself, then stops it); the head comes back.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
S=/root/stage
gunzip -c .stage/bin/treespec.gz > $S/treespec.new && chmod +x $S/treespec.new && mv $S/treespec.new $S/treespec
for i in $(seq 1 ${WAIT:-200}); do pgrep -f "treespec train-drafter" > /dev/null || break; sleep 1; done
pkill -f "treespec train-drafter" && echo "stopped before the end" && sleep 3
grep -v "^step [0-9]*: loss" $S/head/train.log | tail -8 | cut -c1-420
tail -2 $S/head/train.log | cut -c1-300
gzip -c $S/head/train.log > $OUT/train.log.gz
bash benchmarks/gpu/run.sh train-export 2>&1 | tail -9
rm -f $OUT/head.data.json.gz
$S/treespec export-head -m $S/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --head $S/head/head.safetensors --out $S/head/head-q4k.gguf --type q4_k 2>&1 | tail -2
rm -f /tmp/hq4.*; split -b 15M -d -a 2 $S/head/head-q4k.gguf /tmp/hq4.; cp /tmp/hq4.* $OUT/; ls -la $OUT
