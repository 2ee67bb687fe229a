# While training runs (correctness only, no timing): the shipped Q4_K head on the GPU step and
# chain against candle's ops; the generated answers brought back once written.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
S=/root/stage; B=$S/treespec; T=$S/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
D=$S/qwen2.5-coder-0.5b-instruct-awq.gguf
[ -f $D ] || [ "$(ls $S/p/drafter.part* 2>/dev/null | wc -l)" != 10 ] || { cat $S/p/drafter.part* > $D && rm -f $S/p/drafter.part*; }; ls -la $D
$B selftest --device cuda -m $T --head $S/shipped-q4k.gguf > $OUT/selftest-shipped.txt 2>&1; echo "selftest rc $?"
tail -2 $OUT/selftest-shipped.txt | cut -c1-300; grep -i "mtp\|differ\|error" $OUT/selftest-shipped.txt | cut -c1-300 | head -8
[ -f $S/gen/gen.data.json.gz ] && cp $S/gen/gen.data.json.gz $S/gen/gen.log $OUT/; ls -la $OUT
tail -c 400 $S/h2/train.log | tr '\r' '\n' | tail -2
