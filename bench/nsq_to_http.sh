#!/bin/bash
# bench/nsq_to_http.sh NSQD NSQ_TO_HTTP [extra nsq_to_http flags...]
#
# nsq_to_http throughput against a local sink: two in-memory nsqd on free 127.0.0.1 ports;
# the source gets MSGS (default 200,000) SIZE-byte (200) messages on topic `src` (HTTP /mpub),
# then nsq_to_http forwards them as POSTs to the sink nsqd's HTTP `/pub?topic=sink` until the
# sink topic holds them all. Prints the wall time, msgs/s and the CPU (utime+stime from
# /proc) per message of nsq_to_http and of the sink nsqd. Needs python3 and Linux /proc.
set -e
NSQD=$1; TOOL=$2; shift 2
MSGS=${MSGS:-200000}; SIZE=${SIZE:-200}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
D=$(mktemp -d)
trap 'kill $SRC $SINK $TP 2>/dev/null; wait 2>/dev/null; rm -rf $D' EXIT
ST=$(free_port); SH=$(free_port); KT=$(free_port); KH=$(free_port)
mkdir $D/src $D/sink
$NSQD --tcp-address=127.0.0.1:$ST --http-address=127.0.0.1:$SH --data-path=$D/src --mem-queue-size=100000000 >$D/src.log 2>&1 & SRC=$!
$NSQD --tcp-address=127.0.0.1:$KT --http-address=127.0.0.1:$KH --data-path=$D/sink --mem-queue-size=100000000 >$D/sink.log 2>&1 & SINK=$!
sleep 0.5
python3 - "$SH" "$MSGS" "$SIZE" <<'PY'
import sys, urllib.request
port, n, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def post(path, body=b""):
    urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST")).read()
post("/topic/create?topic=src"); post("/channel/create?topic=src&channel=nsq_to_http")
line = b"x" * size
for i in range(0, n, 5000):
    post("/mpub?topic=src", b"\n".join([line] * min(5000, n - i)))
PY
ticks() { s=$(cat /proc/$1/stat); s=${s##*) }; set -- $s; echo $((${12}+${13})); }
k0=$(ticks $SINK); t0=$(date +%s.%N)
${WRAP:-} $TOOL --topic=src --nsqd-tcp-address=127.0.0.1:$ST --post="http://127.0.0.1:$KH/pub?topic=sink" "$@" >$D/tool.log 2>&1 & TP=$!
python3 - "$KH" "$MSGS" <<'PY'
import sys, json, time, urllib.request
port, n = int(sys.argv[1]), int(sys.argv[2])
deadline = time.time() + 600
while time.time() < deadline:
    s = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/stats?format=json&topic=sink"))
    if any(t["topic_name"] == "sink" and t["message_count"] >= n for t in (s.get("topics") or [])):
        break
    time.sleep(0.02)
else:
    sys.exit("timed out")
PY
t1=$(date +%s.%N); c=$(ticks $TP); k1=$(ticks $SINK)
kill -TERM $TP; wait $TP || true
awk -v n=$MSGS -v t0=$t0 -v t1=$t1 -v c=$c -v k=$((k1-k0)) 'BEGIN {
  s = t1 - t0
  printf "msgs=%d secs=%.2f msgs_per_s=%.0f nsq_to_http_cpu_s=%.2f us_per_msg=%.1f sink_nsqd_cpu_s=%.2f sink_us_per_msg=%.1f\n",
    n, s, n / s, c / 100, c / 100 * 1e6 / n, k / 100, k / 100 * 1e6 / n }'
