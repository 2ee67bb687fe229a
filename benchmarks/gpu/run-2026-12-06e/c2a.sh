#!/usr/bin/env bash
# Session 27, call 2a (the repository, the new binary and the old one together pass the 64 MiB
# a call carries): the build before this session's changes unpacked to /root/stage, and the
# synthetic models made there in the background for call 2 (c2.sh), which follows at once.
S=/root/stage; mkdir -p $S
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/nvidia/lib64
xz -dc .stage/bin/treespec-old.xz > $S/treespec-old && chmod +x $S/treespec-old
[ -f $S/tok.gguf ] || xz -dc .stage/tok/tokenizer.gguf.xz > $S/tok.gguf
cat > $S/synth.sh <<EOS
for a in "qwen3-8b q8b" "qwen2.5-0.5b q05t" "qwen3.6-27b q27" "qwen3.5-0.8b q08"; do
  set -- \$a
  [ -f $S/\$2.gguf ] || ($S/treespec-old synth --shape \$1 --tokenizer-from $S/tok.gguf --out $S/\$2.tmp > /dev/null 2>&1 && mv $S/\$2.tmp $S/\$2.gguf) &
done
wait
EOS
setsid nohup bash $S/synth.sh > /dev/null 2>&1 < /dev/null &
sleep 2; ls $S
