#!/usr/bin/env bash
# Throughput and CPU per message of the utilities (issue 12): nsq_tail draining a backlog to
# /dev/null, to_nsq publishing a file, nsq_to_nsq copying a backlog between two nsqd.
#
#   cargo build --release -p nsqd-bin -p nsq_tail-bin -p to_nsq-bin -p nsq_to_nsq-bin -p nsq-bench
#   bench/utilities.sh [MSGS]            # default 1000000 messages of 200 bytes
#
# Environment: BIN (default target/release), MEMQ (nsqd --mem-queue-size, default 10000000:
# the backlog stays in memory, so the daemon's disk does not set the pace), MIF (the tools'
# --max-in-flight, default 200, the reference default), MODES (default "tail to_nsq nsq_to_nsq").
# Each line: RESULT <tool> msgs=<n> secs=<wall> msgs_per_sec=<r> cpu_us_per_msg=<(user+sys)/n>
# with the tool's user+sys CPU from /usr/bin/time (nsq_to_nsq, which runs until stopped:
# from /proc/<pid>/stat when the last message arrived).
set -euo pipefail
MSGS=${1:-1000000}
BIN=${BIN:-target/release}
MEMQ=${MEMQ:-10000000}
MIF=${MIF:-200}
MODES=${MODES:-"tail to_nsq nsq_to_nsq"}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_nsqd NAME: starts nsqd, sets ${NAME}_TCP and ${NAME}_HTTP.
start_nsqd() {
    local name=$1 tcp http
    tcp=$(free_port); http=$(free_port)
    mkdir -p "$WORK/$name"
    "$BIN/nsqd" --data-path="$WORK/$name" --tcp-address="127.0.0.1:$tcp" \
        --http-address="127.0.0.1:$http" --mem-queue-size="$MEMQ" 2>"$WORK/$name.log" &
    PIDS+=($!)
    for _ in $(seq 100); do
        curl -sf "127.0.0.1:$http/ping" >/dev/null && break
        sleep 0.1
    done
    printf -v "${name}_TCP" '%s' "127.0.0.1:$tcp"
    printf -v "${name}_HTTP" '%s' "127.0.0.1:$http"
}

# depth HTTP TOPIC CHANNEL / count HTTP TOPIC
depth() { curl -s "$1/stats?format=json&topic=$2&channel=$3" | python3 -c 'import json,sys; t=json.load(sys.stdin)["topics"]; print(t[0]["channels"][0]["depth"] if t and t[0]["channels"] else 0)'; }
count() { curl -s "$1/stats?format=json&topic=$2" | python3 -c 'import json,sys; t=json.load(sys.stdin)["topics"]; print(t[0]["message_count"] if t else 0)'; }

# backlog HTTP TCP TOPIC CHANNEL: creates the channel, publishes MSGS messages of 200 bytes.
backlog() {
    curl -sf -X POST "$1/topic/create?topic=$3" >/dev/null
    curl -sf -X POST "$1/channel/create?topic=$3&channel=$4" >/dev/null
    "$BIN/bench_writer" --nsqd-tcp-address "$2" --topic "$3" --size 200 --msgs "$MSGS" \
        --runfor 10m >/dev/null 2>&1
    while [ "$(depth "$1" "$3" "$4")" -lt "$MSGS" ]; do sleep 0.2; done
}

result() { # TOOL SECS TIMEFILE
    python3 - "$1" "$2" "$3" "$MSGS" <<'PY'
import sys
tool, secs, tf, n = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
user, sys_ = [float(x) for x in open(tf).read().split()[-2:]]
print(f"RESULT {tool} msgs={n} secs={secs:.2f} msgs_per_sec={n/secs:.0f} "
      f"cpu_us_per_msg={(user+sys_)/n*1e6:.2f} (user {user:.2f}s sys {sys_:.2f}s)")
PY
}

for mode in $MODES; do
case $mode in
tail)
    start_nsqd A
    backlog "$A_HTTP" "$A_TCP" tail_bench ch
    t0=$(date +%s.%N)
    /usr/bin/time -o "$WORK/time" -f "%U %S" "$BIN/nsq_tail" --nsqd-tcp-address "$A_TCP" \
        --topic tail_bench --channel ch --max-in-flight "$MIF" -n "$MSGS" >/dev/null 2>"$WORK/tail.err"
    t1=$(date +%s.%N)
    result nsq_tail "$(echo "$t1 - $t0" | bc)" "$WORK/time"
    ;;
to_nsq)
    start_nsqd A
    python3 -c "
import sys
line = b'x' * 199 + b'\n'
with open('$WORK/lines', 'wb') as f:
    for i in range($MSGS):
        f.write(b'%09d' % i + line[9:])
"
    t0=$(date +%s.%N)
    /usr/bin/time -o "$WORK/time" -f "%U %S" "$BIN/to_nsq" --nsqd-tcp-address "$A_TCP" \
        --topic to_nsq_bench <"$WORK/lines" 2>"$WORK/to_nsq.err"
    t1=$(date +%s.%N)
    [ "$(count "$A_HTTP" to_nsq_bench)" -eq "$MSGS" ] || { echo "to_nsq: wrong count"; exit 1; }
    result to_nsq "$(echo "$t1 - $t0" | bc)" "$WORK/time"
    rm -f "$WORK/lines"
    ;;
nsq_to_nsq)
    start_nsqd A
    start_nsqd B
    backlog "$A_HTTP" "$A_TCP" copy_bench nsq_to_nsq
    t0=$(date +%s.%N)
    "$BIN/nsq_to_nsq" --nsqd-tcp-address "$A_TCP" --topic copy_bench \
        --destination-nsqd-tcp-address "$B_TCP" --max-in-flight "$MIF" --status-every 0 \
        2>"$WORK/nsq_to_nsq.err" &
    tpid=$!
    while [ "$(count "$B_HTTP" copy_bench)" -lt "$MSGS" ]; do sleep 0.05; done
    t1=$(date +%s.%N)
    # user and sys CPU (fields 14 and 15 of /proc/<pid>/stat, in clock ticks) before stopping.
    tck=$(getconf CLK_TCK)
    awk -v t="$tck" '{ printf "%f %f\n", $14 / t, $15 / t }' "/proc/$tpid/stat" >"$WORK/time"
    kill -TERM "$tpid"
    wait "$tpid"
    result nsq_to_nsq "$(echo "$t1 - $t0" | bc)" "$WORK/time"
    ;;
esac
# Stop this mode's daemons before the next one.
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
PIDS=()
done
