#!/usr/bin/env bash
# Starts a small cluster of the given binaries in a network namespace made for it (loopback
# only) and writes what their /metrics serve to OUTDIR: nsqlookupd, two nsqd replicating with
# each other (--replicas=2, e2e latency percentiles), nsqadmin; a topic with a channel, a
# published message, a consumer connected (per_client series) and a deferred message, so
# that every family of docs/metrics.md has samples. Used by contrib/check_metrics.py --scrape.
#
# Usage: contrib/prometheus/scrape-live.sh BINDIR OUTDIR
#        (BINDIR: nsqd, nsqlookupd, nsqadmin, nsq_tail, e.g. target/debug)
set -euo pipefail

BIN=$(realpath "$1")
OUT=$2
mkdir -p "$OUT"
NS=nsqscrape$$
DATA=$(mktemp -d)
ip netns add "$NS"
cleanup() {
    ip netns pids "$NS" 2>/dev/null | xargs -r kill -TERM 2>/dev/null || true
    for _ in $(seq 50); do [[ -z $(ip netns pids "$NS" 2>/dev/null) ]] && break; sleep 0.1; done
    ip netns pids "$NS" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "$NS" 2>/dev/null || true
    rm -rf "$DATA"
}
trap cleanup EXIT
ip -n "$NS" link set lo up
in_ns() { ip netns exec "$NS" "$@"; }
get() { in_ns curl -sf -m 2 "$@"; }
wait_ping() {
    for _ in $(seq 100); do
        [[ $(get "http://127.0.0.1:$1/ping" 2>/dev/null) == OK ]] && return 0
        sleep 0.1
    done
    echo "scrape-live: :$1 did not come up" >&2
    return 1
}

mkdir -p "$DATA/a" "$DATA/b"
in_ns "$BIN/nsqlookupd" --tcp-address=127.0.0.1:4160 --http-address=127.0.0.1:4161 \
    >"$DATA/lookupd.log" 2>&1 &
for n in a b; do
    if [[ $n == a ]]; then tcp=4150 http=4151 peer=4250; else tcp=4250 http=4251 peer=4150; fi
    in_ns "$BIN/nsqd" --data-path="$DATA/$n" --tcp-address=127.0.0.1:$tcp \
        --http-address=127.0.0.1:$http --https-address= --broadcast-address=127.0.0.1 \
        --lookupd-tcp-address=127.0.0.1:4160 --replicas=2 \
        --replication-peer=127.0.0.1:$peer --e2e-processing-latency-percentile=0.99 \
        --e2e-processing-latency-percentile=0.5 >"$DATA/nsqd-$n.log" 2>&1 &
done
in_ns "$BIN/nsqadmin" --http-address=127.0.0.1:4171 --lookupd-http-address=127.0.0.1:4161 \
    >"$DATA/nsqadmin.log" 2>&1 &
wait_ping 4161
wait_ping 4151
wait_ping 4251
wait_ping 4171

# Replication links up (a publish needs a replica's acknowledgement).
for _ in $(seq 100); do
    m=$(get http://127.0.0.1:4151/metrics) || true
    grep -q '^nsq_nsqd_replication_peer_up{.*} 1' <<<"$m" && break
    sleep 0.1
done
get -X POST "http://127.0.0.1:4151/topic/create?topic=scrape" >/dev/null
get -X POST "http://127.0.0.1:4151/channel/create?topic=scrape&channel=ch" >/dev/null
for i in 1 2 3; do get --data-binary "m$i" "http://127.0.0.1:4151/pub?topic=scrape" >/dev/null; done
get --data-binary deferred "http://127.0.0.1:4151/pub?topic=scrape&defer=60000" >/dev/null
# A consumer (per_client series; a delivered message for the e2e latency).
in_ns timeout 5 "$BIN/nsq_tail" --nsqd-tcp-address=127.0.0.1:4150 --topic=scrape --channel=ch \
    -n 2 >/dev/null 2>&1 || true
in_ns "$BIN/nsq_tail" --nsqd-tcp-address=127.0.0.1:4150 --topic=scrape --channel=tail \
    >/dev/null 2>&1 &
sleep 1
get "http://127.0.0.1:4161/lookup?topic=scrape" >/dev/null
get "http://127.0.0.1:4171/api/nodes" >/dev/null || true
get "http://127.0.0.1:4171/api/topics/scrape" >/dev/null || true

get "http://127.0.0.1:4151/metrics?per_client=true" >"$OUT/nsqd-a.prom"
get "http://127.0.0.1:4251/metrics?per_client=true" >"$OUT/nsqd-b.prom"
get "http://127.0.0.1:4161/metrics" >"$OUT/nsqlookupd.prom"
get "http://127.0.0.1:4171/metrics" >"$OUT/nsqadmin.prom"
echo "scrape-live: $(cat "$OUT"/*.prom | grep -c '^# TYPE') families in $OUT" >&2
