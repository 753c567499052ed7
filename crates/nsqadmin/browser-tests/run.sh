#!/usr/bin/env bash
# Browser tests of the nsqadmin UI: builds nsqd and nsqadmin, starts them on free ports,
# installs chromium (apt) and playwright-core (npm) if missing, runs ui.test.mjs, stops both.
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
    --broadcast-address=127.0.0.1 --data-path="$WORK/nsqd" 2>"$WORK/nsqd.log" &
PIDS+=("$!")
NSQD_HTTP="$(listen_addr "$WORK/nsqd.log")"
NSQD_TCP="$(grep -m1 -o 'TCP: listening on [^ ]*' "$WORK/nsqd.log" | sed 's/.* //')"

"$BIN/nsqadmin" --http-address=127.0.0.1:0 --nsqd-http-address="$NSQD_HTTP" \
    --history-interval=1s 2>"$WORK/nsqadmin.log" &
PIDS+=("$!")
ADMIN_HTTP="$(listen_addr "$WORK/nsqadmin.log")"

echo "nsqd http=$NSQD_HTTP tcp=$NSQD_TCP, nsqadmin http=$ADMIN_HTTP" >&2
mkdir -p "$TARGET_DIR/nsqadmin-screenshots"
status=0
NSQADMIN_URL="http://$ADMIN_HTTP" NSQD_HTTP="$NSQD_HTTP" NSQD_TCP="$NSQD_TCP" \
SCREENSHOT_DIR="$TARGET_DIR/nsqadmin-screenshots" \
    node --test --test-concurrency=1 "$HERE/ui.test.mjs" || status=$?
if [ "$status" -ne 0 ]; then
    echo "--- nsqadmin log ---" >&2; tail -n 50 "$WORK/nsqadmin.log" >&2
fi
exit "$status"
