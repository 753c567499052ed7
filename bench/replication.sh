#!/usr/bin/env bash
# bench/replication.sh [NSQD_BIN]     (root: network namespaces)
#
# The cost of replication (issue 22, docs/replication.md): publish rate and end-to-end latency
# of one nsqd with --replicas=1 (replication off, no peers) against the same nsqd in a group
# of GROUP (3) nsqd with --replicas=2 (each listing the others as --replication-peer). Every
# daemon runs in a network namespace of its own ("host" a, b, c: 10.232.0.1-3), the load
# generators in a fourth (d: 10.232.0.4), all joined by a bridge of veths; every publish goes
# to nsqd a. One row per (N, mode), each on freshly started daemons with fresh data dirs:
#
#   mpub      bench_writer MPUB, BATCH_SIZE (200) bodies per command, CONNS_MPUB (2) connections
#   pub       bench_writer --mode pub: 8 connections, one PUB per round trip (go-nsq Publish)
#   producer  bench_writer --mode producer --concurrency 8: one connection shared by 8
#             publishers (go-nsq's Producer from 8 goroutines: pipelined PUBs)
#   latency   bench_writer --rate RATE (20000) msgs/s of single PUBs stamped with their send
#             time, for LAT_SECS (10), while a go-mode bench_reader --latency consumes: p50/p99
#
# Columns: msgs/s published (consumed for latency), CPU µs per message of nsqd a (the origin)
# and of all daemons together (a + its replicas), from utime+stime in /proc/PID/stat. A
# channel `ch` exists (a 200 ms reader creates it) so publishes land in a channel as usual.
# Everything shares the machine's cores: the replicas' CPU competes with the origin's.
#
# Environment: NSQD (binary, if not $1; default $CARGO_TARGET_DIR or target/release/nsqd),
# RUNFOR (5 s), SIZE (200), BATCH_SIZE (200), CONNS_MPUB (2), RATE (20000), LAT_SECS (10),
# LAT_CONNS (1: the writer's connections in latency mode, RATE split between them),
# MEMQ (--mem-queue-size, default 100000000: the origin keeps everything in memory, as
# publish_once.sh; the replicas always write to their replica store), GROUP (3: a b c; 2: a b),
# REPLICAS ("1 2"), MODES ("mpub pub producer latency"), PROFILE (none | strace: strace -c -f
# on nsqd a for the run, summary into the output dir | perfstat: perf stat (task-clock,
# context switches, migrations) per thread of every nsqd into OUT/<run>.perfstat | perf:
# perf record -g of every nsqd into OUT/<run>.perf.data),
# OUT (directory for logs, default a temporary one, kept).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}/release
NSQD=${1:-${NSQD:-$TARGET/nsqd}}
WRITER=$TARGET/bench_writer
READER=$TARGET/bench_reader
RUNFOR=${RUNFOR:-5}
SIZE=${SIZE:-200}
BATCH_SIZE=${BATCH_SIZE:-200}
CONNS_MPUB=${CONNS_MPUB:-2}
RATE=${RATE:-20000}
LAT_SECS=${LAT_SECS:-10}
LAT_CONNS=${LAT_CONNS:-1}
MEMQ=${MEMQ:-100000000}
GROUP=${GROUP:-3}
REPLICAS=${REPLICAS:-1 2}
MODES=${MODES:-mpub pub producer latency}
PROFILE=${PROFILE:-none}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/nsq-repl-bench.XXXXXX")}
mkdir -p "$OUT"
for b in "$NSQD" "$WRITER" "$READER"; do
    [[ -x $b ]] || { echo "$0: $b missing (cargo build --release -p nsqd-bin -p nsq-bench)" >&2; exit 2; }
done
[[ $(id -u) == 0 ]] || { echo "$0: needs root (network namespaces)" >&2; exit 2; }

PFX=nsqb$$
SW=${PFX}sw
HOSTS=(a b c d)
declare -A IP=([a]=10.232.0.1 [b]=10.232.0.2 [c]=10.232.0.3 [d]=10.232.0.4)
declare -A PID=()
CLK_TCK=$(getconf CLK_TCK)

ns() { echo "$PFX$1"; }
in_ns() { local h=$1; shift; ip netns exec "$(ns "$h")" "$@"; }

net_up() {
    ip netns add "$SW"
    ip -n "$SW" link add br0 type bridge
    ip -n "$SW" link set br0 up
    local h
    for h in "${HOSTS[@]}"; do
        ip netns add "$(ns "$h")"
        ip -n "$SW" link add "p$h" type veth peer name eth0 netns "$(ns "$h")"
        ip -n "$SW" link set "p$h" master br0
        ip -n "$SW" link set "p$h" up
        ip -n "$(ns "$h")" addr add "${IP[$h]}/24" dev eth0
        ip -n "$(ns "$h")" link set eth0 up
        ip -n "$(ns "$h")" link set lo up
    done
}

stop_all() {
    local h
    for h in "${!PID[@]}"; do kill -TERM "${PID[$h]}" 2>/dev/null || true; done
    for h in "${!PID[@]}"; do
        for _ in $(seq 100); do kill -0 "${PID[$h]}" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "${PID[$h]}" 2>/dev/null || true
        wait "${PID[$h]}" 2>/dev/null || true
    done
    PID=()
}

cleanup() {
    stop_all
    local h
    for h in "${HOSTS[@]}"; do ip netns del "$(ns "$h")" 2>/dev/null || true; done
    ip netns del "$SW" 2>/dev/null || true
    rm -rf "$OUT"/data-*
}
trap cleanup EXIT
trap 'exit 130' INT TERM

members() { if [[ $GROUP == 2 ]]; then echo a b; else echo a b c; fi; }

start_group() { # replicas run-name
    local n=$1 run=$2 h p flags
    local hs=(a)
    [[ $n -gt 1 ]] && read -r -a hs <<<"$(members)"
    for h in "${hs[@]}"; do
        flags=()
        if [[ $n -gt 1 ]]; then
            flags+=("--replicas=$n")
            for p in "${hs[@]}"; do [[ $p != "$h" ]] && flags+=("--replication-peer=${IP[$p]}:4150"); done
        fi
        mkdir -p "$OUT/data-$run-$h"
        # Not through in_ns: $! must be nsqd itself (ip netns exec execs it).
        ip netns exec "$(ns "$h")" "$NSQD" --tcp-address=0.0.0.0:4150 --http-address=0.0.0.0:4151 \
            --broadcast-address="${IP[$h]}" --data-path="$OUT/data-$run-$h" \
            --mem-queue-size="$MEMQ" "${flags[@]}" >"$OUT/$run-nsqd-$h.log" 2>&1 &
        PID[$h]=$!
    done
    for h in "${hs[@]}"; do
        for _ in $(seq 100); do
            in_ns "$h" curl -sf -m 1 "http://${IP[$h]}:4151/ping" >/dev/null 2>&1 && break
            kill -0 "${PID[$h]}" 2>/dev/null || { cat "$OUT/$run-nsqd-$h.log" >&2; exit 1; }
            sleep 0.1
        done
    done
    if [[ $n -gt 1 ]]; then
        # a's links up, its replica set full and no catch-up in progress.
        for _ in $(seq 200); do
            in_ns a curl -sf "http://${IP[a]}:4151/stats?format=json" | python3 -c '
import json, sys
r = json.load(sys.stdin)["replication"]
ok = all(p["state"] == "connected" and not p["catching_up"] for p in r["peers"])
sys.exit(0 if ok and sum(p["in_replica_set"] for p in r["peers"]) == r["replicas"] - 1 else 1)' && return 0
            sleep 0.1
        done
        echo "replication links of nsqd a did not come up" >&2
        exit 1
    fi
}

ticks() { # host
    local s
    s=$(<"/proc/${PID[$1]}/stat")
    s=${s##*) }
    # shellcheck disable=SC2086
    set -- $s
    echo $((${12} + ${13}))
}
all_ticks() { local t=0 h; for h in "${!PID[@]}"; do t=$((t + $(ticks "$h"))); done; echo $t; }
field() { local kv; for kv in $1; do [[ $kv == "$2="* ]] && { echo "${kv#*=}"; return; }; done; echo -; }

FMT='%-2s %-9s %5s %6s %5s %11s %9s %10s %10s %7s %7s %7s\n'
ROWS=()
row() { ROWS+=("$(printf "$FMT" "$@")"); }

run_mode() { # replicas mode
    local n=$1 mode=$2 run="n$1-$2" A="--nsqd-tcp-address=${IP[a]}:4150" res rres=""
    start_group "$n" "$run"
    in_ns d "$READER" "$A" --runfor=200ms --connections=1 >/dev/null 2>&1
    local sp=""
    case $PROFILE in
        strace) strace -c -f $(for p in "${PID[@]}"; do echo -p "$p"; done) -o "$OUT/$run.strace" & sp=$!; sleep 0.5 ;;
        perfstat) perf stat -e task-clock,context-switches,cpu-migrations -p "$(IFS=,; echo "${PID[*]}")" \
            --per-thread -o "$OUT/$run.perfstat" & sp=$!; sleep 0.3 ;;
        perf) perf record -F 999 -g -p "$(IFS=,; echo "${PID[*]}")" -o "$OUT/$run.perf.data" \
            >/dev/null 2>&1 & sp=$!; sleep 0.5 ;;
    esac
    local ta0 t0 ta1 t1
    ta0=$(ticks a); t0=$(all_ticks)
    case $mode in
        mpub) res=$(in_ns d "$WRITER" "$A" --size="$SIZE" --batch-size="$BATCH_SIZE" \
            --connections="$CONNS_MPUB" --runfor="${RUNFOR}s" 2>"$OUT/$run.err" | grep RESULT) ;;
        pub) res=$(in_ns d "$WRITER" "$A" --size="$SIZE" --mode=pub --connections=8 \
            --runfor="${RUNFOR}s" 2>"$OUT/$run.err" | grep RESULT) ;;
        producer) res=$(in_ns d "$WRITER" "$A" --size="$SIZE" --mode=producer --concurrency=8 \
            --runfor="${RUNFOR}s" 2>"$OUT/$run.err" | grep RESULT) ;;
        latency)
            ip netns exec "$(ns d)" "$READER" "$A" --latency --fin-mode=go --connections=1 \
                --runfor="$((LAT_SECS + 2))s" >"$OUT/$run.reader" 2>&1 &
            local rp=$!
            sleep 0.3
            res=$(in_ns d "$WRITER" "$A" --size="$SIZE" --rate="$RATE" --connections="$LAT_CONNS" \
                --runfor="${LAT_SECS}s" 2>"$OUT/$run.err" | grep RESULT)
            wait $rp
            rres=$(grep RESULT "$OUT/$run.reader")
            ;;
    esac
    ta1=$(ticks a); t1=$(all_ticks)
    if [[ -n $sp ]]; then kill -INT "$sp" 2>/dev/null || true; wait "$sp" 2>/dev/null || true; fi
    local failures=-
    [[ $n -gt 1 ]] && failures=$(in_ns a curl -sf "http://${IP[a]}:4151/stats?format=json" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["replication"]["publish_failures"])')
    stop_all
    rm -rf "$OUT"/data-"$run"-*
    echo "  $run: $res ${rres:+| $rres}" >&2
    local msgs rate secs conns
    if [[ $mode == latency ]]; then
        # msgs/s: what the writer achieved of RATE; CPU per message consumed by the reader.
        msgs=$(field "$rres" msgs); rate=$(field "$res" msgs_per_sec); secs=$(field "$res" secs)
    else
        msgs=$(field "$res" msgs); rate=$(field "$res" msgs_per_sec); secs=$(field "$res" secs)
    fi
    case $mode in mpub) conns=$CONNS_MPUB ;; pub) conns=8 ;; producer) conns="1x8" ;; latency) conns=$LAT_CONNS ;; esac
    local us_a us_all
    us_a=$(awk -v t=$((ta1 - ta0)) -v n="$msgs" -v k="$CLK_TCK" 'BEGIN{printf "%.2f", t/k*1e6/n}')
    us_all=$(awk -v t=$((t1 - t0)) -v n="$msgs" -v k="$CLK_TCK" 'BEGIN{printf "%.2f", t/k*1e6/n}')
    row "$n" "$mode" "$SIZE" "$conns" "$(printf %.1f "$secs")" "$(printf %.0f "$rate")" "$failures" \
        "$us_a" "$us_all" "$(field "$rres" p50_ms)" "$(field "$rres" p99_ms)" "$(field "$rres" max_ms)"
}

net_up
echo "# nsqd $NSQD; group of $GROUP for N>1; size $SIZE B; runfor ${RUNFOR}s; mem-queue-size $MEMQ; logs in $OUT" >&2
for mode in $MODES; do
    for n in $REPLICAS; do
        run_mode "$n" "$mode"
    done
done
printf "$FMT" N mode size conns secs msgs/s pub_fail cpu_us_a cpu_us_all p50_ms p99_ms max_ms
printf '%s\n' "${ROWS[@]}"
