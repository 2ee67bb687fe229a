# Hold the machine while generation/training runs: report the logs' tails.
S=/root/stage
sleep ${HOLD:-100}
pgrep -f "treespec train-drafter" > /dev/null && echo "training: running" || echo "training: NOT running"
[ -f $S/h2/finished ] && echo "FINISHED"
tail -c 300 $S/gen/gen.log 2>/dev/null | tr '\r' '\n' | tail -2; echo
grep -v "^step [0-9]*: loss" $S/h2/train.log 2>/dev/null | grep -v "^profile" | tail -2 | cut -c1-400; tail -c 300 $S/h2/train.log 2>/dev/null | tr '\r' '\n' | tail -1 | cut -c1-200
