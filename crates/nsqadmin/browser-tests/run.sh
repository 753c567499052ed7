#!/usr/bin/env bash
# Browser tests of the nsqadmin UI: builds nsqd and nsqadmin, starts them on free ports,
# installs chromium (apt) and playwright-core (npm) if missing, runs ui.test.mjs, stops them.
# One nsqd (with --http-peek, for the channel page's Peek) and its nsqadmin; besides, a
# replicating pair (A and B, --replicas=2, each the other's --replication-peer, without
# --http-peek) and a second nsqadmin over A, B and the first nsqd, for the Replication page
# (and a Peek that finds peek off).
# Screenshots go to target/nsqadmin-screenshots/.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
cd "$ROOT"

if [ ! -x /usr/bin/chromium ]; then
    echo "installing chromium..." >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
if [ ! -d "$HERE/node_modules/playwright-core" ]; then
    (cd "$HERE" && (npm ci --no-audit --no-fund || npm install --no-audit --no-fund))
fi

cargo build -q -p nsqd-bin -p nsqadmin-bin
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).target_directory))')"
BIN="$TARGET_DIR/debug"

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

# Waits for "HTTP: listening on ADDR" in a log file and prints ADDR.
listen_addr() {
    for _ in $(seq 1 200); do
        if a="$(grep -m1 -o 'HTTP: listening on [^ ]*' "$1" 2>/dev/null)"; then
            echo "${a##* }"
            return 0
        fi
        sleep 0.05
    done
    echo "no listen line in $1:" >&2
    cat "$1" >&2
    return 1
}

mkdir -p "$WORK/nsqd"
"$BIN/nsqd" --tcp-address=127.0.0.1:0 --http-address=127.0.0.1:0 \
    --broadcast-address=127.0.0.1 --data-path="$WORK/nsqd" --http-peek 2>"$WORK/nsqd.log" &
PIDS+=("$!")
NSQD_HTTP="$(listen_addr "$WORK/nsqd.log")"
NSQD_TCP="$(grep -m1 -o 'TCP: listening on [^ ]*' "$WORK/nsqd.log" | sed 's/.* //')"

"$BIN/nsqadmin" --http-address=127.0.0.1:0 --nsqd-http-address="$NSQD_HTTP" \
    --history-interval=1s 2>"$WORK/nsqadmin.log" &
PIDS+=("$!")
ADMIN_HTTP="$(listen_addr "$WORK/nsqadmin.log")"

# A free TCP port on 127.0.0.1 (bound to 0, then released for a daemon to take).
free_port() {
    node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}
A_TCP="127.0.0.1:$(free_port)"
B_TCP="127.0.0.1:$(free_port)"
for n in a b; do
    if [ "$n" = a ]; then own="$A_TCP" peer="$B_TCP"; else own="$B_TCP" peer="$A_TCP"; fi
    mkdir -p "$WORK/nsqd-$n"
    "$BIN/nsqd" --tcp-address="$own" --http-address=127.0.0.1:0 --broadcast-address=127.0.0.1 \
        --data-path="$WORK/nsqd-$n" --replicas=2 --replication-peer="$peer" 2>"$WORK/nsqd-$n.log" &
    PIDS+=("$!")
done
A_HTTP="$(listen_addr "$WORK/nsqd-a.log")"
B_HTTP="$(listen_addr "$WORK/nsqd-b.log")"
"$BIN/nsqadmin" --http-address=127.0.0.1:0 --nsqd-http-address="$A_HTTP" \
    --nsqd-http-address="$B_HTTP" --nsqd-http-address="$NSQD_HTTP" 2>"$WORK/nsqadmin-repl.log" &
PIDS+=("$!")
REPL_ADMIN_HTTP="$(listen_addr "$WORK/nsqadmin-repl.log")"

echo "nsqd http=$NSQD_HTTP tcp=$NSQD_TCP, nsqadmin http=$ADMIN_HTTP" >&2
echo "replicating nsqd a=$A_HTTP ($A_TCP) b=$B_HTTP ($B_TCP), nsqadmin http=$REPL_ADMIN_HTTP" >&2
mkdir -p "$TARGET_DIR/nsqadmin-screenshots"
status=0
NSQADMIN_URL="http://$ADMIN_HTTP" NSQD_HTTP="$NSQD_HTTP" NSQD_TCP="$NSQD_TCP" \
REPL_ADMIN_URL="http://$REPL_ADMIN_HTTP" REPL_NSQD_HTTP="$A_HTTP,$B_HTTP" REPL_NSQD_TCP="$A_TCP,$B_TCP" \
SCREENSHOT_DIR="$TARGET_DIR/nsqadmin-screenshots" \
    node --test --test-concurrency=1 "$HERE/ui.test.mjs" || status=$?
if [ "$status" -ne 0 ]; then
    echo "--- nsqadmin log ---" >&2; tail -n 50 "$WORK/nsqadmin.log" >&2
    echo "--- nsqadmin (replication) log ---" >&2; tail -n 50 "$WORK/nsqadmin-repl.log" >&2
    echo "--- nsqd a log ---" >&2; tail -n 30 "$WORK/nsqd-a.log" >&2
    echo "--- nsqd b log ---" >&2; tail -n 30 "$WORK/nsqd-b.log" >&2
fi
exit "$status"
