#!/usr/bin/env bash
# Session 23, call 1: llama.cpp's source (vendored by llama-cpp-python 0.3.36, packed as in
# ../shared/device/README.md) to a fresh machine; its build (llama-bench and
# llama-speculative-simple, which runs `--spec-type draft-mtp`) starts detached, about 5 minutes.
mkdir -p /root/llama
tar -xJf .stage/l/llama.tar.xz -C /root/llama
cd /root/llama && setsid nohup bash -c "cmake -S . -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DCMAKE_BUILD_TYPE=Release && cmake --build build --target llama-bench llama-speculative-simple -j16 \
  && touch /root/llama/done" > /root/llama/build.log 2>&1 < /dev/null &
sleep 2; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; tail -2 /root/llama/build.log
