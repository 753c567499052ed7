#!/usr/bin/env bash
# bench/run.sh NSQD_BIN [extra nsqd flags...]
#
# Benchmarks an nsqd binary (ours or the reference Go one: only flags both accept are used)
# with bench_writer / bench_reader, in two setups:
#   default    --mem-queue-size left at its default (10000): the backlog spills to the diskqueue
#   in-memory  --mem-queue-size=100000000: the backlog stays in memory
# and three phases per setup:
#   publish    bench_writer for RUNFOR seconds (nobody consuming: the channel builds a backlog)
#   drain      bench_reader --drain until the channel has been quiet for 1 s
#   both       bench_writer and bench_reader together for RUNFOR seconds
# For each phase: msgs/s and MiB/s, the daemon's CPU time per message (utime+stime delta from
# /proc/<pid>/stat), and its peak RSS so far (VmHWM from /proc/<pid>/status).
#
# Environment: RUNFOR (seconds, default 3), SIZE (default 200), BATCH_SIZE (default 200),
#              DRAIN_MAX (Go duration bounding the drain phase, default 300s).
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: $0 NSQD_BIN [extra nsqd flags...]" >&2
    exit 2
fi
NSQD_BIN=$1
shift
EXTRA_FLAGS=("$@")
if [[ ! -x $NSQD_BIN ]]; then
    echo "$0: $NSQD_BIN is not an executable" >&2
    exit 2
fi
NSQD_BIN=$(cd "$(dirname "$NSQD_BIN")" && pwd)/$(basename "$NSQD_BIN")

RUNFOR=${RUNFOR:-3}
SIZE=${SIZE:-200}
BATCH_SIZE=${BATCH_SIZE:-200}
DRAIN_MAX=${DRAIN_MAX:-300s}
TOPIC=sub_bench
CHANNEL=ch

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
echo "# building bench tools (release)"
(cd "$ROOT" && cargo build --release -p nsq-bench)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
WRITER=$TARGET_DIR/release/bench_writer
READER=$TARGET_DIR/release/bench_reader

CLK_TCK=$(getconf CLK_TCK)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nsq-bench.XXXXXX")
NSQD_PID=""

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

# Peak resident set size of the daemon, in KiB.
rss_hwm_kib() {
    awk '/^VmHWM:/ { print $2 }' "/proc/$NSQD_PID/status"
}

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
            return 0
        fi
        sleep 0.1
    done
    echo "nsqd did not listen on 127.0.0.1:$TCP_PORT within 10 s; its log:" >&2
    cat "$LOG" >&2
    exit 1
}

# field NAME from a "RESULT ..." line
field() { # line name
    local kv
    for kv in $1; do
        if [[ $kv == "$2="* ]]; then
            echo "${kv#*=}"
            return
        fi
    done
    echo 0
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

ROWS=()
# add_row setup phase writer-RESULT reader-RESULT cpu-ticks
add_row() {
    local setup=$1 phase=$2 wres=$3 rres=$4 ticks=$5
    local pub sub pub_rate sub_rate pub_mib sub_mib per cpu_s cpu_us rss
    pub=$(field "$wres" msgs)
    sub=$(field "$rres" msgs)
    pub_rate=$(field "$wres" msgs_per_sec)
    sub_rate=$(field "$rres" msgs_per_sec)
    pub_mib=$(field "$wres" mib_per_sec)
    sub_mib=$(field "$rres" mib_per_sec)
    # CPU per message: per published message when there was publishing (in "both" that is the
    # whole publish + deliver + FIN life of a message), else per consumed message.
    per=$pub
    [[ $per -gt 0 ]] || per=$sub
    cpu_s=$(awk -v t="$ticks" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", t / hz }')
    cpu_us=$(awk -v t="$ticks" -v hz="$CLK_TCK" -v n="$per" \
        'BEGIN { if (n > 0) printf "%.3f", t / hz * 1e6 / n; else print "-" }')
    rss=$(awk -v k="$(rss_hwm_kib)" 'BEGIN { printf "%.1f", k / 1024 }')
    [[ -n $wres ]] || { pub="-"; pub_rate="-"; pub_mib="-"; }
    [[ -n $rres ]] || { sub="-"; sub_rate="-"; sub_mib="-"; }
    ROWS+=("$(printf '%-10s %-8s %10s %12s %9s %10s %12s %9s %7s %11s %11s' \
        "$setup" "$phase" "$pub" "$pub_rate" "$pub_mib" "$sub" "$sub_rate" "$sub_mib" \
        "$cpu_s" "$cpu_us" "$rss")")
    echo "  => ${ROWS[-1]}"
}

run_setup() { # setup-name [nsqd flags...]
    local name=$1
    shift
    echo
    echo "# setup $name: $NSQD_BIN $* ${EXTRA_FLAGS[*]-}"
    start_nsqd "$name" "$@"
    local addr=127.0.0.1:$TCP_PORT t0 t1 wres rres setup_res
    local common=(--nsqd-tcp-address="$addr" --topic="$TOPIC" --size="$SIZE")

    # Create the topic and channel up front (a SUB does both), so that the publish phase
    # includes handing messages from the topic to the channel, as with a live consumer.
    run_tool setup_res "$READER" "${common[@]}" --channel="$CHANNEL" --runfor=200ms --connections=1

    echo "## publish (${RUNFOR}s)"
    t0=$(cpu_ticks)
    run_tool wres "$WRITER" "${common[@]}" --batch-size="$BATCH_SIZE" --runfor="${RUNFOR}s"
    t1=$(cpu_ticks)
    add_row "$name" publish "$wres" "" $((t1 - t0))

    echo "## drain"
    t0=$(cpu_ticks)
    run_tool rres "$READER" "${common[@]}" --channel="$CHANNEL" --drain --runfor="$DRAIN_MAX"
    t1=$(cpu_ticks)
    add_row "$name" drain "" "$rres" $((t1 - t0))

    echo "## both (${RUNFOR}s)"
    local rout=$WORK/$name.both-reader.out
    t0=$(cpu_ticks)
    "$READER" "${common[@]}" --channel="$CHANNEL" --runfor="${RUNFOR}s" >"$rout" 2>&1 &
    local rpid=$!
    run_tool wres "$WRITER" "${common[@]}" --batch-size="$BATCH_SIZE" --runfor="${RUNFOR}s"
    if ! wait "$rpid"; then
        cat "$rout" >&2
        echo "FAILED: bench_reader in phase both" >&2
        exit 1
    fi
    t1=$(cpu_ticks)
    sed 's/^/    /' "$rout"
    rres=$(grep '^RESULT ' "$rout" | tail -n 1)
    add_row "$name" both "$wres" "$rres" $((t1 - t0))

    echo "## peak RSS (VmHWM) of nsqd: $(rss_hwm_kib) KiB"
    stop_nsqd
}

echo "# nsqd: $NSQD_BIN ${EXTRA_FLAGS[*]-}"
echo "# RUNFOR=${RUNFOR}s SIZE=$SIZE BATCH_SIZE=$BATCH_SIZE, $(nproc) cores," \
    "bench connections: $(nproc) per tool"
run_setup default
run_setup in-memory --mem-queue-size=100000000

echo
echo "# results (pub = bench_writer, sub = bench_reader; cpu = nsqd utime+stime over the phase;"
echo "#          cpu_us/msg per published message, or per consumed one in drain; rss = VmHWM so far)"
printf '%-10s %-8s %10s %12s %9s %10s %12s %9s %7s %11s %11s\n' \
    setup phase pub_msgs pub_msgs/s pub_MiB/s sub_msgs sub_msgs/s sub_MiB/s cpu_s cpu_us/msg rss_MiB
for row in "${ROWS[@]}"; do
    echo "$row"
done
