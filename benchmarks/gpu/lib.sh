# The preamble every GPU run script shares (source it from the repository root on the device
# machine): the stage folder, the CUDA runtime's path, treespec's cache, the staged binary and
# tokenizer header unpacked (carry [".stage/bin", ".stage/tok"]). Sets S (stage folder) and B
# (the binary). Older run folders spell this out in each script.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
export TREESPEC_CACHE=$S/cache
[ -f .stage/bin/treespec.xz ] && xz -dc .stage/bin/treespec.xz > $S/treespec && chmod +x $S/treespec
[ -f .stage/tok/tokenizer.gguf.xz ] && [ ! -f $S/tok.gguf ] && xz -dc .stage/tok/tokenizer.gguf.xz > $S/tok.gguf
B=$S/treespec
