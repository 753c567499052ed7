#!/usr/bin/env bash
# bench/run.sh [NSQD_BIN] [extra nsqd flags...]       (or NSQD=path bench/run.sh)
#
# Benchmarks an nsqd binary (ours or the reference Go one: only flags both accept are used)
# with bench_writer / bench_reader in every mode and prints ONE table. Modes, per setup
# (default: --mem-queue-size 10000, the backlog spills to disk; in-memory: 100000000):
#   publish-mpub  bench_writer MPUB batches, one connection per core          RUNFOR s
#   publish-pub   bench_writer 8 connections, one synchronous PUB each (go-nsq Publish)
#   drain-go      bench_reader --fin-mode go (one write per FIN, like go-nsq), 1 connection,
#                 RDY 2500, draining the backlog for RUNFOR s
#   drain-gopace  drain-go with --handler-us HANDLER_US (10): ~10 us of client work per
#                 message before its FIN, the pace of a real go-nsq consumer
#   drain-nsq     bench_reader --fin-mode nsq (NSQ's bench_reader flushing), one per core
#   drain-batch   bench_reader --fin-mode batch --drain: the rest of the backlog, until empty
#   both-go       publish-mpub and drain-go together for RUNFOR s, on a topic of its own
#   both-nsq      publish-mpub and drain-nsq together for RUNFOR s, on a topic of its own
#                 (so both measure one stream in and out, not the earlier phases' backlog)
# and once each, on a fresh daemon with default flags:
#   latency       bench_writer --rate RATE (single PUBs, send time in the body) for LAT_SECS
#                 while a go-mode bench_reader --latency records end-to-end latency (HDR)
#   fanout        FANOUT_MSGS published to a topic with 10 channels, then drained by one
#                 go-mode consumer per channel: delivered msgs/s, CPU per delivered message
#   idle          IDLE_TOPICS topics x 2 channels created over HTTP, then IDLE_SECS s idle:
#                 daemon CPU (% of one core) and RSS
# Daemon CPU is utime+stime from /proc/PID/stat over the phase; RSS is VmRSS after the phase
# and hwm VmHWM (peak so far) from /proc/PID/status.
#
# Environment: NSQD (binary, if not given as $1), RUNFOR (s, default 3), SIZE (200),
# BATCH_SIZE (200), HANDLER_US (10), DRAIN_MAX (Go duration bounding drain-batch, 300s), RATE (20000),
# LAT_SECS (10), FANOUT_MSGS (100000), IDLE_TOPICS (2000), IDLE_SECS (10),
# MODES (space-separated subset of: setups latency fanout idle; default all).
set -euo pipefail

if [[ $# -ge 1 && $1 != -* ]]; then
    NSQD_BIN=$1
    shift
else
    NSQD_BIN=${NSQD:-}
fi
if [[ -z $NSQD_BIN ]]; then
    echo "usage: $0 NSQD_BIN [extra nsqd flags...]   (or NSQD=path $0)" >&2
    exit 2
fi
EXTRA_FLAGS=("$@")
if [[ ! -x $NSQD_BIN ]]; then
    echo "$0: $NSQD_BIN is not an executable" >&2
    exit 2
fi
NSQD_BIN=$(cd "$(dirname "$NSQD_BIN")" && pwd)/$(basename "$NSQD_BIN")

RUNFOR=${RUNFOR:-3}
SIZE=${SIZE:-200}
BATCH_SIZE=${BATCH_SIZE:-200}
HANDLER_US=${HANDLER_US:-10}
DRAIN_MAX=${DRAIN_MAX:-300s}
RATE=${RATE:-20000}
LAT_SECS=${LAT_SECS:-10}
FANOUT_MSGS=${FANOUT_MSGS:-100000}
IDLE_TOPICS=${IDLE_TOPICS:-2000}
IDLE_SECS=${IDLE_SECS:-10}
MODES=${MODES:-setups latency fanout idle}
TOPIC=sub_bench
CHANNEL=ch
NPROC=$(nproc)

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
echo "# building bench tools (release)"
(cd "$ROOT" && cargo build --release -p nsq-bench)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
WRITER=$TARGET_DIR/release/bench_writer
READER=$TARGET_DIR/release/bench_reader

CLK_TCK=$(getconf CLK_TCK)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nsq-bench.XXXXXX")
NSQD_PID=""
BG_PIDS=()

stop_nsqd() {
    if [[ -n $NSQD_PID ]] && kill -0 "$NSQD_PID" 2>/dev/null; then
        kill -TERM "$NSQD_PID" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$NSQD_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$NSQD_PID" 2>/dev/null || true
        wait "$NSQD_PID" 2>/dev/null || true
    fi
    NSQD_PID=""
}
cleanup() {
    local p
    for p in ${BG_PIDS[@]+"${BG_PIDS[@]}"}; do kill "$p" 2>/dev/null || true; done
    stop_nsqd
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free TCP port on 127.0.0.1 (bind to port 0 and read back what the kernel chose).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# utime+stime of the daemon, in clock ticks.
cpu_ticks() {
    local stat
    stat=$(<"/proc/$NSQD_PID/stat")
    # Fields after the ")" closing the command name: state is field 3, utime 14, stime 15.
    stat=${stat##*) }
    # shellcheck disable=SC2086
    set -- $stat
    echo $((${12} + ${13}))
}

status_kib() { # VmRSS | VmHWM
    awk -v k="$1:" '$1 == k { print $2 }' "/proc/$NSQD_PID/status"
}

now_s() { date +%s.%N; }

start_nsqd() { # setup-name [nsqd flags...]
    local name=$1
    shift
    local data=$WORK/$name
    mkdir -p "$data"
    TCP_PORT=$(free_port)
    HTTP_PORT=$(free_port)
    while [[ $HTTP_PORT == "$TCP_PORT" ]]; do HTTP_PORT=$(free_port); done
    LOG=$WORK/$name.log
    "$NSQD_BIN" --tcp-address="127.0.0.1:$TCP_PORT" --http-address="127.0.0.1:$HTTP_PORT" \
        --data-path="$data" "$@" ${EXTRA_FLAGS[@]+"${EXTRA_FLAGS[@]}"} >"$LOG" 2>&1 &
    NSQD_PID=$!
    local i
    for i in $(seq 100); do
        if ! kill -0 "$NSQD_PID" 2>/dev/null; then
            echo "nsqd exited during startup; its log:" >&2
            cat "$LOG" >&2
            exit 1
        fi
        if (exec 3<>"/dev/tcp/127.0.0.1/$TCP_PORT") 2>/dev/null; then
            ADDR=127.0.0.1:$TCP_PORT
            return 0
        fi
        sleep 0.1
    done
    echo "nsqd did not listen on 127.0.0.1:$TCP_PORT within 10 s; its log:" >&2
    cat "$LOG" >&2
    exit 1
}

# field NAME from a "RESULT ..." line ("-" when absent)
field() { # line name
    local kv
    for kv in $1; do
        if [[ $kv == "$2="* ]]; then
            echo "${kv#*=}"
            return
        fi
    done
    echo "-"
}

# Runs a tool, echoes its output, and stores its RESULT line in the named variable.
run_tool() { # var tool args...
    local var=$1
    shift
    local out
    if ! out=$("$@" 2>&1); then
        echo "$out" >&2
        echo "FAILED: $*" >&2
        exit 1
    fi
    echo "$out" | sed 's/^/    /'
    printf -v "$var" '%s' "$(echo "$out" | grep '^RESULT ' | tail -n 1)"
}

# Starts a tool in the background; its output goes to the file.
bg_tool() { # outfile tool args...
    local out=$1
    shift
    "$@" >"$out" 2>&1 &
    BG_PID=$!
    BG_PIDS+=("$BG_PID")
}

# Waits for a background tool and stores its RESULT line in the named variable.
wait_tool() { # var pid outfile
    local var=$1 pid=$2 out=$3
    if ! wait "$pid"; then
        cat "$out" >&2
        echo "FAILED: background tool (see above)" >&2
        exit 1
    fi
    sed 's/^/    /' "$out"
    printf -v "$var" '%s' "$(grep '^RESULT ' "$out" | tail -n 1)"
}

FMT='%-13s %-9s %4s %6s %6s %10s %10s %8s %6s %10s %7s %7s %7s %7s %8s %8s\n'
HEADER=$(printf "$FMT" mode setup size conns secs in_msgs/s out_msgs/s cpu_s cpu_% \
    cpu_us/msg p50_ms p99_ms p99.9ms max_ms rss_MiB hwm_MiB)
ROWS=()
# add_row mode setup conns writer-RESULT reader-RESULT cpu-ticks secs per(pub|sub)
add_row() {
    local mode=$1 setup=$2 conns=$3 wres=$4 rres=$5 ticks=$6 secs=$7 per=$8
    local in_rate=- out_rate=- n=0 cpu_s cpu_pct cpu_us rss hwm
    [[ -z $wres ]] || in_rate=$(printf '%.0f' "$(field "$wres" msgs_per_sec)")
    [[ -z $rres ]] || out_rate=$(printf '%.0f' "$(field "$rres" msgs_per_sec)")
    case $per in
        pub) n=$(field "$wres" msgs) ;;
        sub) n=$(field "$rres" msgs) ;;
    esac
    cpu_s=$(awk -v t="$ticks" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", t / hz }')
    cpu_pct=$(awk -v t="$ticks" -v hz="$CLK_TCK" -v s="$secs" \
        'BEGIN { if (s > 0) printf "%.1f", t / hz / s * 100; else print "-" }')
    cpu_us=$(awk -v t="$ticks" -v hz="$CLK_TCK" -v n="$n" \
        'BEGIN { if (n > 0) printf "%.3f", t / hz * 1e6 / n; else print "-" }')
    rss=$(awk -v k="$(status_kib VmRSS)" 'BEGIN { printf "%.1f", k / 1024 }')
    hwm=$(awk -v k="$(status_kib VmHWM)" 'BEGIN { printf "%.1f", k / 1024 }')
    ROWS+=("$(printf "$FMT" "$mode" "$setup" "$SIZE" "$conns" "$(printf '%.1f' "$secs")" \
        "$in_rate" "$out_rate" "$cpu_s" "$cpu_pct" "$cpu_us" "$(field "$rres" p50_ms)" \
        "$(field "$rres" p99_ms)" "$(field "$rres" p999_ms)" "$(field "$rres" max_ms)" \
        "$rss" "$hwm")")
    echo "  => ${ROWS[-1]}"
}

# phase MODE SETUP CONNS PER [w:ARGS...] [r:ARGS...]: runs a writer and/or a reader with the
# given arguments (split on spaces) at the same time and records a row.
phase() {
    local mode=$1 setup=$2 conns=$3 per=$4 wargs=$5 rargs=$6
    local common=(--nsqd-tcp-address="$ADDR" --size="$SIZE")
    local wres="" rres="" t0 t1 s0 s1 rpid="" rout=$WORK/$mode.$setup.reader.out
    echo "## $mode ($setup)"
    s0=$(now_s)
    t0=$(cpu_ticks)
    if [[ -n $rargs ]]; then
        # shellcheck disable=SC2086
        bg_tool "$rout" "$READER" "${common[@]}" $rargs
        rpid=$BG_PID
    fi
    if [[ -n $wargs ]]; then
        [[ -z $rpid ]] || sleep 0.2 # let the reader subscribe first
        # shellcheck disable=SC2086
        run_tool wres "$WRITER" "${common[@]}" $wargs
    fi
    [[ -z $rpid ]] || wait_tool rres "$rpid" "$rout"
    t1=$(cpu_ticks)
    s1=$(now_s)
    add_row "$mode" "$setup" "$conns" "$wres" "$rres" $((t1 - t0)) \
        "$(awk -v a="$s0" -v b="$s1" 'BEGIN { print b - a }')" "$per"
}

run_setup() { # setup-name [nsqd flags...]
    local name=$1
    shift
    echo
    echo "# setup $name: $NSQD_BIN $* ${EXTRA_FLAGS[*]-}"
    start_nsqd "$name" "$@"
    local t=--topic=$TOPIC c=--channel=$CHANNEL setup_res
    # Create the topic and channel up front (a SUB does both), so that publishing already pays
    # for handing messages from the topic to the channel, as with a live consumer.
    run_tool setup_res "$READER" --nsqd-tcp-address="$ADDR" $t $c --runfor=200ms --connections=1
    local w="$t --batch-size=$BATCH_SIZE --runfor=${RUNFOR}s"
    phase publish-mpub "$name" "${NPROC}w" pub "$w" ""
    phase publish-pub "$name" 8w pub "$t --mode=pub --connections=8 --runfor=${RUNFOR}s" ""
    phase drain-go "$name" 1r sub "" "$t $c --fin-mode=go --runfor=${RUNFOR}s"
    phase drain-gopace "$name" 1r sub "" "$t $c --fin-mode=go --handler-us=$HANDLER_US --runfor=${RUNFOR}s"
    phase drain-nsq "$name" "${NPROC}r" sub "" "$t $c --fin-mode=nsq --runfor=${RUNFOR}s"
    phase drain-batch "$name" "${NPROC}r" sub "" "$t $c --fin-mode=batch --drain --runfor=$DRAIN_MAX"
    # The both-at-once phases get fresh topics (the reader's SUB creates topic and channel
    # before the writer starts): publishing and consuming one stream, as NSQ's bench does. On
    # the topic above, readers would also drain what the earlier phases left, and CPU per
    # published message would count that drain too.
    local tg=--topic=${TOPIC}_both_go tn=--topic=${TOPIC}_both_nsq
    local wb="--batch-size=$BATCH_SIZE --runfor=${RUNFOR}s"
    phase both-go "$name" "${NPROC}w/1r" pub "$tg $wb" "$tg $c --fin-mode=go --runfor=${RUNFOR}s"
    phase both-nsq "$name" "${NPROC}w/${NPROC}r" pub "$tn $wb" "$tn $c --fin-mode=nsq --runfor=${RUNFOR}s"
    stop_nsqd
}

run_latency() {
    local t=--topic=lat_bench
    echo
    echo "# latency: $RATE msgs/s for ${LAT_SECS}s on a fresh daemon (default flags)"
    start_nsqd latency
    phase latency default 1w/1r sub "$t --rate=$RATE --runfor=${LAT_SECS}s" \
        "$t --channel=lat --fin-mode=go --latency --runfor=$((LAT_SECS + 2))s"
    stop_nsqd
}

run_fanout() {
    local t=--topic=fan_bench setup_res
    echo
    echo "# fanout: $FANOUT_MSGS messages to 10 channels on a fresh daemon (default flags)"
    start_nsqd fanout
    run_tool setup_res "$READER" --nsqd-tcp-address="$ADDR" $t --channel=fan --channels=10 \
        --fin-mode=batch --runfor=200ms
    run_tool setup_res "$WRITER" --nsqd-tcp-address="$ADDR" $t --batch-size="$BATCH_SIZE" \
        --msgs="$FANOUT_MSGS" --runfor=600s
    phase fanout default 10r sub "" "$t --channel=fan --channels=10 --fin-mode=go --drain --runfor=$DRAIN_MAX"
    stop_nsqd
}

run_idle() {
    echo
    echo "# idle: $IDLE_TOPICS topics x 2 channels, then ${IDLE_SECS}s idle"
    start_nsqd idle
    local s0 s1 t0 t1
    s0=$(now_s)
    python3 - "$HTTP_PORT" "$IDLE_TOPICS" <<'EOF'
import http.client, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
def post(path):
    c.request("POST", path, body=b"")
    r = c.getresponse()
    r.read()
    if r.status != 200:
        sys.exit(f"POST {path}: HTTP {r.status}")
for i in range(n):
    post(f"/topic/create?topic=idle{i}")
    for ch in ("a", "b"):
        post(f"/channel/create?topic=idle{i}&channel={ch}")
EOF
    s1=$(now_s)
    echo "    created in $(awk -v a="$s0" -v b="$s1" 'BEGIN { printf "%.2f", b - a }') s"
    sleep 2
    t0=$(cpu_ticks)
    sleep "$IDLE_SECS"
    t1=$(cpu_ticks)
    add_row idle "${IDLE_TOPICS}x2" 0 "" "" $((t1 - t0)) "$IDLE_SECS" none
    stop_nsqd
}

echo "# nsqd: $NSQD_BIN ${EXTRA_FLAGS[*]-}"
echo "# RUNFOR=${RUNFOR}s SIZE=$SIZE BATCH_SIZE=$BATCH_SIZE RATE=$RATE LAT_SECS=$LAT_SECS" \
    "FANOUT_MSGS=$FANOUT_MSGS, $NPROC cores"
if [[ " $MODES " == *" setups "* ]]; then
    run_setup default
    run_setup in-memory --mem-queue-size=100000000
fi
[[ " $MODES " != *" latency "* ]] || run_latency
[[ " $MODES " != *" fanout "* ]] || run_fanout
[[ " $MODES " != *" idle "* ]] || run_idle

echo
echo "# results: size = message bytes; conns = writer (w) / reader (r) connections;"
echo "#   secs = phase wall time; cpu = nsqd utime+stime over the phase (cpu_% of one core);"
echo "#   cpu_us/msg per published message (publish, both) or per consumed/delivered one"
echo "#   (drain, latency, fanout); latency end to end (send stamp -> consumer read);"
echo "#   rss = VmRSS after the phase, hwm = VmHWM so far"
printf '%s\n' "$HEADER"
for row in "${ROWS[@]}"; do
    printf '%s\n' "$row"
done
