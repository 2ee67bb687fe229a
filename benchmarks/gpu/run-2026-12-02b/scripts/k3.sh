# Start training from head-j (same data), cosine over STEPS.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
S=/root/stage
HEAD_DIR=.stage/head-j bash benchmarks/gpu/run.sh train-carry | tail -2
TREESPEC_PROFILE=1 SELF_PROMPTS=8000 ANSWER_TOKENS=256 K=4 STEPS=${STEPS:-2200} INIT=$S/head/init.gguf bash benchmarks/gpu/run.sh train-start | tail -3
sleep 40; tail -c 800 $S/head/train.log
