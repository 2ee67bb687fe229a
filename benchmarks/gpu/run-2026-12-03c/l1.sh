#!/usr/bin/env bash
# Session 19, call 3: the binary and llama.cpp's source (vendored by llama-cpp-python 0.3.36, packed
# as in ../shared/device/README.md) to a fresh machine; llama.cpp's build starts detached (about 5
# minutes) while the target's 23 parts are staged with run-2026-12-03b/stage.sh.
S=/root/stage; mkdir -p $S/p /root/llama
gunzip -c .stage/bin/treespec.gz > $S/treespec && chmod +x $S/treespec
tar -xJf .stage/l/llama.tar.xz -C /root/llama
cd /root/llama && setsid nohup bash -c "cmake -S . -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DCMAKE_BUILD_TYPE=Release && cmake --build build --target llama-bench -j16 && touch /root/llama/done" \
  > /root/llama/build.log 2>&1 < /dev/null &
sleep 2; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader; tail -2 /root/llama/build.log
