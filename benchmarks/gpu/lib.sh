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
# Synthesise the named models into $S in the background unless already there (`wait` for them):
# q08 (qwen3.5-0.8b), q8b (qwen3-8b), q27 (qwen3.6-27b), each with the staged tokenizer.
stage_synth() {
  local m shape
  for m in "$@"; do
    case $m in q08) shape=qwen3.5-0.8b ;; q8b) shape=qwen3-8b ;; q27) shape=qwen3.6-27b ;; *) continue ;; esac
    [ -f $S/$m.gguf ] || $B synth --shape $shape --tokenizer-from $S/tok.gguf --out $S/$m.gguf > /dev/null 2>&1 &
  done
}
