#!/usr/bin/env bash
# bench/compare.sh OURS_NSQD REF_NSQD
#
# The summary table of bench/README.md ("Summary against NSQ v1.3"): both daemons measured in
# one run, ROUNDS alternating rounds (ours, then the reference, then ours...), each row's median
# and the ratio ours/reference. Rows (200-byte bodies, RUNFOR s each):
#   mem-publish / mem-drain / mem-both    --mem-queue-size=100000000: WRITER (MPUB of 200, one
#                                         connection per core) for RUNFOR s, then READER on that
#                                         backlog for RUNFOR s, then both at once on a new topic
#   default-publish / -drain / -both      the same with --mem-queue-size=10000 (NSQ's default:
#                                         the backlog goes to the disk queue)
#   gonsq-pub8                            8 synchronous publishers (one PUB per round trip)
#   gonsq-consumer                        one consumer, MaxInFlight 2500, on a 1.5M backlog
#                                         (default setup: most of it on disk)
#   gonsq-fanout10                        100,000 messages on a topic with 10 channels, one
#                                         consumer per channel; per delivered message
#   latency                               bench_writer --rate 20000 (single PUBs) for LAT_SECS
#                                         while a go-like bench_reader --latency consumes
#   idle                                  IDLE_TOPICS topics x 2 channels, then IDLE_SECS idle
# CPU is the daemon's utime + stime (/proc/PID/stat) over the phase, per message (published for
# publish and both, consumed for drain, delivered for fan-out).
#
# Clients (env): WRITER / READER, NSQ's Go bench_writer / bench_reader (default: ours, in their
# NSQ modes: `--fin-mode nsq`); GONSQ, the go-nsq program in bench/gonsq (`go build` there; the
# default: our tools in their go-nsq modes, `--mode pub` and `--fin-mode go`, which are cheaper
# clients than go-nsq itself). Other env: ROUNDS (3), RUNFOR (3), RATE (20000), LAT_SECS (10),
# IDLE_TOPICS (2000), IDLE_SECS (10), ROWS (subset of: mem default gopub gocons fanout latency
# idle), KEEP (a file to append the raw lines to).
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 OURS_NSQD REF_NSQD" >&2
    exit 2
fi
OURS=$(realpath "$1")
REF=$(realpath "$2")
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
(cd "$ROOT" && cargo build --release -q -p nsq-bench)
RB=$TARGET_DIR/release
WRITER=${WRITER:-}
READER=${READER:-}
GONSQ=${GONSQ:-}
ROUNDS=${ROUNDS:-3}
RUNFOR=${RUNFOR:-3}
RATE=${RATE:-20000}
LAT_SECS=${LAT_SECS:-10}
IDLE_TOPICS=${IDLE_TOPICS:-2000}
IDLE_SECS=${IDLE_SECS:-10}
ROWS=${ROWS:-mem default gopub gocons fanout latency idle}
CLK=$(getconf CLK_TCK)
RAW=$(mktemp "${TMPDIR:-/tmp}/nsq-compare.XXXXXX")
PID=""
DIR=""

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
start() { # BIN MEMQ
    DIR=$(mktemp -d "${TMPDIR:-/tmp}/nsq-compare-data.XXXXXX")
    TP=$(free_port)
    HP=$(free_port)
    "$1" --data-path="$DIR" --tcp-address=127.0.0.1:"$TP" --http-address=127.0.0.1:"$HP" \
        --mem-queue-size="$2" >"$DIR.log" 2>&1 &
    PID=$!
    for _ in $(seq 200); do
        curl -sf "127.0.0.1:$HP/ping" >/dev/null && return 0
        sleep 0.05
    done
    echo "$1 did not start: $(cat "$DIR.log")" >&2
    exit 1
}
stop() {
    kill -TERM "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
    rm -rf "$DIR" "$DIR.log"
    PID=""
}
trap 'stop; rm -f "$RAW"' EXIT
cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
rss_mb() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$PID/status"; }
channel() { # TOPIC CHANNEL
    curl -sf -XPOST "127.0.0.1:$HP/topic/create?topic=$1" >/dev/null
    curl -sf -XPOST "127.0.0.1:$HP/channel/create?topic=$1&channel=$2" >/dev/null
}
# The rate a client printed: our RESULT line, or the Go tools' "NNN.NNNops/s".
rate_of() { grep -o 'msgs_per_sec=[0-9.]*\|[0-9.]*ops/s' | head -1 | sed 's/msgs_per_sec=//; s/ops\/s//'; }
msgs_of() { grep -o 'msgs=[0-9]*' | head -1 | cut -d= -f2; }
# LABEL ROW RATE MSGS TICKS: one raw line (rate in msgs/s, CPU in µs per message).
emit() {
    awk -v l="$1" -v n="$2" -v r="$3" -v m="$4" -v c="$5" -v k="$CLK" \
        'BEGIN { printf "%s %s %.0f %.3f\n", l, n, r, (m > 0 ? c / k * 1e6 / m : 0) }' | tee -a "$RAW"
}
# LABEL ROW RATE TICKS: a row of a RUNFOR-long phase, its messages counted from its rate.
emit_timed() {
    emit "$1" "$2" "$3" "$(awk -v r="$3" -v t="$RUNFOR" 'BEGIN { print r * t }')" "$4"
}
writer() { # TOPIC
    if [[ -n $WRITER ]]; then
        "$WRITER" -nsqd-tcp-address=127.0.0.1:"$TP" -topic="$1" -runfor="${RUNFOR}s" -size=200 2>&1
    else
        "$RB/bench_writer" --nsqd-tcp-address=127.0.0.1:"$TP" --topic="$1" --runfor="${RUNFOR}s" 2>&1
    fi
}
reader() { # TOPIC
    if [[ -n $READER ]]; then
        "$READER" -nsqd-tcp-address=127.0.0.1:"$TP" -topic="$1" -runfor="${RUNFOR}s" -size=200 2>&1
    else
        "$RB/bench_reader" --nsqd-tcp-address=127.0.0.1:"$TP" --topic="$1" --runfor="${RUNFOR}s" \
            --fin-mode=nsq 2>&1
    fi
}
setup() { # LABEL BIN NAME MEMQ
    local label=$1 name=$3 c0 c1 r rr
    start "$2" "$4"
    channel sub_bench ch
    c0=$(cpu); r=$(writer sub_bench | rate_of); c1=$(cpu)
    emit_timed "$label" "$name-publish" "$r" $((c1 - c0))
    c0=$(cpu); r=$(reader sub_bench | rate_of); c1=$(cpu)
    emit_timed "$label" "$name-drain" "$r" $((c1 - c0))
    channel both ch
    c0=$(cpu)
    reader both >"$DIR.reader" &
    local rp=$!
    r=$(writer both | rate_of)
    wait "$rp"
    c1=$(cpu)
    rr=$(rate_of <"$DIR.reader")
    emit_timed "$label" "$name-both" "$r" $((c1 - c0))
    emit_timed "$label" "$name-both-out" "$rr" $((c1 - c0))
    rm -f "$DIR.reader"
    stop
}
fill() { # TOPIC MSGS
    "$RB/bench_writer" --nsqd-tcp-address=127.0.0.1:"$TP" --topic="$1" --msgs="$2" >/dev/null 2>&1
}
want() { [[ " $ROWS " == *" $1 "* ]]; }
# LABEL ROW "GONSQ ARGS" FALLBACK...: one go-nsq row, the daemon's CPU over the client's run;
# the client is $GONSQ with those arguments, or else the fallback command (our bench tool).
client_row() {
    local label=$1 row=$2 args=$3 c0 c1 o
    shift 3
    c0=$(cpu)
    if [[ -n $GONSQ ]]; then
        # shellcheck disable=SC2086
        o=$("$GONSQ" $args -addr 127.0.0.1:"$TP")
    else
        o=$("$@" --nsqd-tcp-address=127.0.0.1:"$TP" 2>/dev/null)
    fi
    c1=$(cpu)
    emit "$label" "$row" "$(rate_of <<<"$o")" "$(msgs_of <<<"$o")" $((c1 - c0))
}

round() { # LABEL BIN
    local label=$1 bin=$2 c0 c1
    want mem && setup "$label" "$bin" mem 100000000
    want default && setup "$label" "$bin" default 10000
    if want gopub; then
        start "$bin" 10000
        channel sub_bench ch
        client_row "$label" gonsq-pub8 "-mode pub -runfor ${RUNFOR}s" \
            "$RB/bench_writer" --mode=pub --connections=8 --runfor="${RUNFOR}s"
        stop
    fi
    if want gocons; then
        start "$bin" 10000
        channel sub_bench ch
        fill sub_bench 1500000
        client_row "$label" gonsq-consumer "-mode consumer -runfor ${RUNFOR}s" \
            "$RB/bench_reader" --fin-mode=go --runfor="${RUNFOR}s"
        stop
    fi
    if want fanout; then
        start "$bin" 10000
        for i in $(seq 0 9); do channel fan "ch$i"; done
        fill fan 100000
        client_row "$label" gonsq-fanout10 "-mode fanout -topic fan -channel ch -runfor 60s" \
            "$RB/bench_reader" --topic=fan --fin-mode=go --channels=10 --connections=10 --drain \
            --runfor=60s
        stop
    fi
    if want latency; then
        start "$bin" 10000
        channel lat ch
        "$RB/bench_reader" --nsqd-tcp-address=127.0.0.1:"$TP" --topic=lat --fin-mode=go --latency \
            --runfor="$((LAT_SECS + 2))s" >"$DIR.lat" 2>/dev/null &
        local lp=$!
        sleep 0.5
        "$RB/bench_writer" --nsqd-tcp-address=127.0.0.1:"$TP" --topic=lat --rate="$RATE" \
            --runfor="${LAT_SECS}s" >/dev/null 2>&1
        wait "$lp"
        local p50 p99
        p50=$(grep -o 'p50_ms=[0-9.]*' "$DIR.lat" | cut -d= -f2)
        p99=$(grep -o 'p99_ms=[0-9.]*' "$DIR.lat" | cut -d= -f2)
        echo "$label latency-p50_ms $p50 0" | tee -a "$RAW"
        echo "$label latency-p99_ms $p99 0" | tee -a "$RAW"
        rm -f "$DIR.lat"
        stop
    fi
    if want idle; then
        start "$bin" 10000
        for i in $(seq 1 "$IDLE_TOPICS"); do
            echo "topic/create?topic=idle$i"
            echo "channel/create?topic=idle$i&channel=a"
            echo "channel/create?topic=idle$i&channel=b"
        done | sed "s|^|http://127.0.0.1:$HP/|" | xargs -n 300 curl -sf -XPOST -o /dev/null
        sleep 2
        c0=$(cpu)
        sleep "$IDLE_SECS"
        c1=$(cpu)
        awk -v l="$label" -v c=$((c1 - c0)) -v k="$CLK" -v s="$IDLE_SECS" \
            'BEGIN { printf "%s idle-cpu_pct %.2f 0\n", l, c / k / s * 100 }' | tee -a "$RAW"
        echo "$label idle-rss_mb $(rss_mb) 0" | tee -a "$RAW"
        stop
    fi
}

for r in $(seq 1 "$ROUNDS"); do
    echo "# round $r of $ROUNDS"
    round ours "$OURS"
    round ref "$REF"
done
[[ -n ${KEEP:-} ]] && cat "$RAW" >>"$KEEP"

echo
echo "# medians of $ROUNDS rounds (rate: msgs/s, or ms for latency, % / MB for idle; cpu: µs per message)"
awk '
    { key = $1 SUBSEP $2; n[key]++; rate[key, n[key]] = $3; cpu[key, n[key]] = $4; rows[$2] = 1; order[$2] = (order[$2] ? order[$2] : NR) }
    function median(arr, key, cnt,    i, j, t, v) {
        for (i = 1; i <= cnt; i++) v[i] = arr[key, i]
        for (i = 1; i <= cnt; i++) for (j = i + 1; j <= cnt; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        return cnt % 2 ? v[(cnt + 1) / 2] : (v[cnt / 2] + v[cnt / 2 + 1]) / 2
    }
    END {
        printf "%-16s %12s %10s %12s %10s %8s %8s\n", "row", "ours", "ours_cpu", "ref", "ref_cpu", "rate_x", "cpu_x"
        m = 0
        for (r in rows) { m++; names[m] = r }
        for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (order[names[j]] < order[names[i]]) { t = names[i]; names[i] = names[j]; names[j] = t }
        for (i = 1; i <= m; i++) {
            r = names[i]; o = "ours" SUBSEP r; f = "ref" SUBSEP r
            or = median(rate, o, n[o]); oc = median(cpu, o, n[o]); fr = median(rate, f, n[f]); fc = median(cpu, f, n[f])
            printf "%-16s %12.3f %10.3f %12.3f %10.3f %8.2f %8.2f\n", r, or, oc, fr, fc, (fr > 0 ? or / fr : 0), (fc > 0 ? oc / fc : 0)
        }
    }' "$RAW"
