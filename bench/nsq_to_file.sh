#!/bin/bash
# bench/nsq_to_file.sh [NSQ_TO_FILE [NSQD]] [extra nsq_to_file flags...]
#
# nsq_to_file writing a backlog to disk: starts NSQD (default target/release/nsqd) on free
# ports with a fresh data dir, publishes MSGS (default 1,000,000) SIZE-byte (default 200)
# messages with bench_writer, then starts NSQ_TO_FILE (default target/release/nsq_to_file)
# on the topic with an output dir in OUT_BASE (default /tmp) and polls nsqd's /stats every
# 50 ms until every message is finished, then sends SIGTERM. Prints the time from the tool's
# start to the last FIN, msgs/s, the tool's CPU (utime+stime from /proc, read just before
# the SIGTERM) and CPU per message, and the bytes on disk. The tool gets
# --sync-interval=$SYNC_INTERVAL (default 100ms) before the extra flags: like the reference,
# it leaves the last messages of the backlog (fewer than a sync point's worth) in flight
# until the tick, which would otherwise add up to the default 30 s to the measured time.
# Build first: cargo build --release -p nsq_to_file-bin -p nsqd-bin -p nsq-bench.
T=$(cd "$(dirname "$0")/.." && pwd)/target/release
TOOL=${1:-$T/nsq_to_file}; NSQD=${2:-$T/nsqd}; shift $(( $# < 2 ? $# : 2 ))
MSGS=${MSGS:-1000000}; SIZE=${SIZE:-200}
D=$(mktemp -d); OUT=$(mktemp -d "${OUT_BASE:-/tmp}/ntf-bench.XXXXXX")
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port); HP=$(free_port)
$NSQD --tcp-address=127.0.0.1:$PORT --http-address=127.0.0.1:$HP --data-path=$D ${NSQD_FLAGS:-} >$D/log 2>&1 &
NP=$!
sleep 0.5
$T/bench_writer --nsqd-tcp-address=127.0.0.1:$PORT --topic=tofile --msgs=$MSGS --size=$SIZE --runfor=120s >/dev/null 2>&1
stats() { curl -s "http://127.0.0.1:$HP/stats?format=json&topic=tofile&channel=nsq_to_file&include_clients=false"; }
field() { python3 -c "
import json,sys
d=json.load(sys.stdin)
t=[t for t in d.get('topics',[]) if t['topic_name']=='tofile']
c=[c for c in t[0]['channels'] if c['channel_name']=='nsq_to_file'] if t else []
print((c[0]['message_count']-c[0]['depth']-c[0]['in_flight_count']) if c else 0)"; }
ticks() { s=$(cat /proc/$1/stat); s=${s##*) }; set -- $s; echo "${12} ${13}"; }
t0=$(date +%s.%N)
$TOOL --topic=tofile --nsqd-tcp-address=127.0.0.1:$PORT --output-dir=$OUT \
  --sync-interval=${SYNC_INTERVAL:-100ms} "$@" 2>$D/tool.log &
TP=$!
while true; do
  done_n=$(stats | field)
  [ "$done_n" -ge "$MSGS" ] && break
  kill -0 $TP 2>/dev/null || { echo "nsq_to_file exited"; cat $D/tool.log; break; }
  sleep 0.05
done
t1=$(date +%s.%N)
read cu cs <<<"$(ticks $TP)"; cpu=$((cu+cs))
kill -TERM $TP; wait $TP; rc=$?
bytes=$(du -sb $OUT | cut -f1)
kill $NP; wait $NP 2>/dev/null
awk -v t0=$t0 -v t1=$t1 -v n=$MSGS -v c=$cpu -v cu=$cu -v cs=$cs -v b=$bytes -v rc=$rc 'BEGIN{
  s=t1-t0; printf "msgs=%d secs=%.2f msgs_per_s=%.0f cpu_s=%.2f (user %.2f sys %.2f) cpu_us_per_msg=%.2f bytes_on_disk=%d exit=%d\n", n, s, n/s, c/100, cu/100, cs/100, c/100*1e6/n, b, rc}'
rm -rf $D $OUT
