#!/bin/bash
# bench/publish_once.sh NSQD [mpub|pub|producer|both-go|both-nsq] [secs] [none|perf|syscalls]
#
# One publish measurement for A/B comparisons (the publishing counterpart of drain_once.sh):
# starts NSQD on free ports with --mem-queue-size MEMQ (default 100000000: all in memory; 10000
# is NSQ's default, where the backlog goes to disk), creates the topic and channel with a
# 200 ms reader, then publishes for SECS (default 3) and prints the writer's (and reader's)
# RESULT line with the daemon's CPU (utime+stime from /proc) per published message.
#   mpub      bench_writer MPUB (--batch-size 200), one connection per core
#   pub       bench_writer --mode=pub --connections=8: one PUB per round trip, go-nsq's Publish
#   producer  bench_writer --mode=producer: one connection, 8 publishers (go-nsq's Producer
#             shared by 8 goroutines: PUBs pipelined, one write each)
#   both-go   mpub while a go-mode bench_reader (one FIN per write) consumes the same topic
#   both-nsq  mpub while NSQ-mode bench_readers consume it
# With `perf` it writes /tmp/perf.data (perf record -g; PERFCG="--call-graph dwarf" for
# better user-space stacks); with `syscalls` it counts the daemon's syscalls with perf's
# tracepoints. Build the tools first: cargo build --release -p nsq-bench.
NSQD=$1; MODE=${2:-mpub}; SECS=${3:-3}; TOOL=${4:-none}
T=$(cd "$(dirname "$0")/.." && pwd)/target/release
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
D=$(mktemp -d); PORT=$(free_port); HP=$(free_port)
$NSQD --tcp-address=127.0.0.1:$PORT --http-address=127.0.0.1:$HP --data-path=$D \
    --mem-queue-size=${MEMQ:-100000000} >$D/log 2>&1 &
P=$!
sleep 0.5
A=--nsqd-tcp-address=127.0.0.1:$PORT
$T/bench_reader $A --runfor=200ms --connections=1 >/dev/null 2>&1
ticks() { s=$(cat /proc/$P/stat); s=${s##*) }; set -- $s; echo $((${12}+${13})); }
case $TOOL in
  perf) perf record -F 2000 ${PERFCG:--g} -p $P -o /tmp/perf.data -- sleep $SECS >/dev/null 2>&1 & SP=$!; sleep 0.1;;
  syscalls) perf stat -x, -o $D/pstat.out -e raw_syscalls:sys_enter,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex,syscalls:sys_enter_pwrite64 -p $P & SP=$!; sleep 0.3;;
esac
t0=$(ticks)
case $MODE in
  both-go) $T/bench_reader $A --runfor=${SECS}s --fin-mode=go >$D/r.out 2>/dev/null & RP=$!; sleep 0.2;;
  both-nsq) $T/bench_reader $A --runfor=${SECS}s --fin-mode=nsq >$D/r.out 2>/dev/null & RP=$!; sleep 0.2;;
esac
case $MODE in
  pub) W=$($T/bench_writer $A --mode=pub --connections=8 --runfor=${SECS}s 2>/dev/null | grep RESULT);;
  producer) W=$($T/bench_writer $A --mode=producer --concurrency=8 --runfor=${SECS}s 2>/dev/null | grep RESULT);;
  *) W=$($T/bench_writer $A --batch-size=200 --runfor=${SECS}s 2>/dev/null | grep RESULT);;
esac
[[ -n ${RP:-} ]] && wait $RP
t1=$(ticks)
case $TOOL in
  perf) wait $SP;;
  syscalls) kill -INT $SP; wait $SP; SYSC=$(awk -F, '/sys_enter/ {n=$3; sub(/.*:sys_enter_?/, "", n); if (n == "") n = "total"; printf "%s=%s ", n, $1}' $D/pstat.out);;
esac
kill $P; wait $P 2>/dev/null
[[ -n ${RP:-} ]] && grep RESULT $D/r.out
msgs=$(echo $W | sed 's/.*msgs=\([0-9]*\).*/\1/')
echo "$W cpu_s=$(awk -v t=$((t1-t0)) 'BEGIN{print t/100}') us_per_pub=$(awk -v t=$((t1-t0)) -v n=$msgs 'BEGIN{printf "%.3f", t/100*1e6/n}') ${SYSC:-}"
rm -rf $D
