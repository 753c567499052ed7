#!/bin/bash
# bench/drain_once.sh NSQD [none|strace|perf] [fin-mode] [secs]
#
# One drain measurement for A/B comparisons: starts NSQD in memory (MEMQ: --mem-queue-size,
# default 100000000; 10000 puts the backlog on disk) on free ports, fills a
# channel with MSGS (default 3,000,000) 200-byte messages, then runs bench_reader
# --fin-mode MODE (default go) for SECS (default 5) and prints its RESULT line with the
# daemon's CPU (utime+stime from /proc) per consumed message. With `strace` it also prints
# `strace -c -f -p` for the drain; with `perf` it writes /tmp/perf.data (perf record -g);
# with `syscalls` it counts the daemon's syscalls with perf's tracepoints (far less intrusive
# than strace, which stops the daemon at every syscall and so batches its work for it).
# NSQD_ARGS adds nsqd flags (e.g. --parked-reads=false). READER_ARGS adds bench_reader flags (e.g. --handler-us=10 for a go-nsq-paced consumer).
# The client's own CPU (user/sys seconds, from /usr/bin/time) is printed too: what the daemon
# does changes what the client's syscalls cost; so are the daemon's peak RSS (VmHWM) and the
# data directory's size at the end of the drain.
# Build the tools first: cargo build --release -p nsq-bench.
NSQD=$1; TOOL=${2:-none}; MODE=${3:-go}; SECS=${4:-5}
T=$(cd "$(dirname "$0")/.." && pwd)/target/release
D=$(mktemp -d); PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
HP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
$NSQD --tcp-address=127.0.0.1:$PORT --http-address=127.0.0.1:$HP --data-path=$D --mem-queue-size=${MEMQ:-100000000} ${NSQD_ARGS:-} >$D/log 2>&1 &
P=$!
sleep 0.5
A=--nsqd-tcp-address=127.0.0.1:$PORT
$T/bench_reader $A --runfor=100ms --connections=1 --fin-mode=batch >/dev/null 2>&1
$T/bench_writer $A --msgs=${MSGS:-3000000} --runfor=60s >/dev/null 2>&1
ticks() { s=$(cat /proc/$P/stat); s=${s##*) }; set -- $s; echo $((${12}+${13})); }
t0=$(ticks)
case $TOOL in
  strace) strace -c -f -p $P -o $D/strace.out & SP=$!; sleep 0.3;;
  perf) perf record -g -p $P -o /tmp/perf.data -- sleep $SECS >/dev/null 2>&1 & SP=$!; sleep 0.3;;
  syscalls) perf stat -x, -o $D/pstat.out -e raw_syscalls:sys_enter,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex,syscalls:sys_enter_writev -p $P & SP=$!; sleep 0.3;;
esac
R=$(/usr/bin/time -f "client_cpu_user=%U client_cpu_sys=%S client_wall=%e" -o $D/client_time $T/bench_reader $A --runfor=${SECS}s --fin-mode=$MODE ${READER_ARGS:-} 2>/dev/null | grep RESULT)
t1=$(ticks)
case $TOOL in
  strace) kill -INT $SP; wait $SP; cat $D/strace.out | head -20;;
  perf) wait $SP;;
  syscalls) kill -INT $SP; wait $SP; SYSC=$(awk -F, '/sys_enter/ {n=$3; sub(/.*:sys_enter_?/, "", n); if (n == "") n = "total"; printf "%s=%s ", n, $1}' $D/pstat.out);;
esac
RSS=$(awk '/VmHWM/ {print $2}' /proc/$P/status)
DISK=$(du -sk $D | cut -f1)
kill $P; wait $P 2>/dev/null
msgs=$(echo $R | sed 's/.*msgs=\([0-9]*\).*/\1/')
echo "$R $(cat $D/client_time) cpu_s=$(awk -v t=$((t1-t0)) 'BEGIN{print t/100}') us_per_msg=$(awk -v t=$((t1-t0)) -v n=$msgs 'BEGIN{printf "%.3f", t/100*1e6/n}') rss_peak_kb=$RSS datadir_kb=$DISK ${SYSC:-}"
rm -rf $D
