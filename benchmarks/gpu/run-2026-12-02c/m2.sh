# Assemble the models; start (detached) the target's answers to the harvested prompts, then
# training from head-k over head-j's data plus those answers.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
S=/root/stage; B=$S/treespec; T=$S/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf; D=$S/qwen2.5-coder-0.5b-instruct-awq.gguf
[ -f $T ] || { cat $S/p/target.part* > $T && rm -f $S/p/target.part*; }
[ -f $D ] || [ "$(ls $S/p/drafter.part* 2>/dev/null | wc -l)" != 10 ] || { cat $S/p/drafter.part* > $D && rm -f $S/p/drafter.part*; }
ls -la $T; sha256sum $T | cut -c1-16
cat $S/hk/head.gguf.* > $S/hk.gguf; ls -la $S/hk.gguf
mkdir -p $S/gen $S/h2
gunzip -c $S/td/code.jsonl.gz > $S/td/code.jsonl; gunzip -c $S/td/writing.jsonl.gz > $S/td/writing.jsonl
[ -f $S/h2/head.safetensors.data.json ] || gunzip -c $S/hk/head.data.json.gz > $S/h2/head.safetensors.data.json
wc -l $S/td/*.jsonl
cat > $S/gentrain.sh <<EOS
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH
export TREESPEC_PROFILE=1
$B train-drafter --device cuda --context 16384 --target $T --out $S/gen/head.safetensors --steps 0 \
  --data $S/td/code.jsonl $S/td/writing.jsonl --answer-tokens 256 > $S/gen/gen.log 2>&1
gzip -c $S/gen/head.safetensors.data.json > $S/gen/gen.data.json.gz
$B train-drafter --device cuda --context 16384 --target $T --out $S/h2/head.safetensors --steps ${STEPS:-1300} \
  --self-prompts 8000 --answer-tokens 256 --k 4 --eval --batch-tokens 8192 --cache-gib 64 --lr 2e-4 \
  --lr-schedule cosine --init $S/hk.gguf --extra-data $S/gen/head.safetensors.data.json > $S/h2/train.log 2>&1
echo done > $S/h2/finished
EOS
setsid nohup bash $S/gentrain.sh > $S/gentrain.log 2>&1 < /dev/null &
sleep 45; tail -c 600 $S/gen/gen.log; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
