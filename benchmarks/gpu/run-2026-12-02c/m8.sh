# A build for sm_120 (CUDA_COMPUTE_CAP=120) on the H200: it must refuse with one line.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
S=/root/stage; T=$S/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
gunzip -c .stage/m/bin120.gz > $S/treespec120 && chmod +x $S/treespec120
timeout 30 $S/treespec120 selftest --device cuda; echo "selftest rc $?"
timeout 30 $S/treespec120 generate --device cuda -m $T -p hi --max-tokens 4; echo "generate rc $?"
