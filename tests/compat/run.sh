#!/usr/bin/env bash
# Runs two NSQ client libraries' OWN test suites against this repo's nsqd / nsqlookupd:
#
#   gnsq 1.0.2   (Python; the tests/ shipped in its PyPI sdist, slow/integration tests included)
#   nsqjs 0.13.0 (Node;   the test/ shipped in its npm tarball, integration tests included)
#
# Our binaries are put first in PATH, so the suites' own harnesses start them.
# Allow-lists (tests/compat/{gnsq,nsqjs}-allowlist.txt) name the tests that may fail; any
# other failing test makes this script exit non-zero. See tests/compat/README.md.
#
# Env:
#   NSQD_BIN, NSQLOOKUPD_BIN  use these binaries (a file, or a directory holding nsqd /
#                             nsqlookupd) instead of `cargo build --release`
#   COMPAT_SUITES             "gnsq nsqjs" (default) or one of them
#   COMPAT_SUITE_TIMEOUT      seconds per suite run (default 600)
#   COMPAT_NO_NETNS=1         do not run the suites in private network namespaces
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=$HERE/.cache
LIB=$HERE/lib
SUITES=${COMPAT_SUITES:-gnsq nsqjs}
SUITE_TIMEOUT=${COMPAT_SUITE_TIMEOUT:-600}

GNSQ_VERSION=1.0.2
GNSQ_MIN_TESTS=108 # what gnsq 1.0.2's suite has; fewer means tests silently dropped out
NSQJS_VERSION=0.13.0
NSQJS_MIN_TESTS=171

export PIP_DISABLE_PIP_VERSION_CHECK=1
export PYTHONDONTWRITEBYTECODE=1
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false

log() { echo "compat: $*" >&2; }
die() {
    log "ERROR: $*"
    exit 2
}

mkdir -p "$CACHE"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nsq-compat.XXXXXX")
TOTALS=$WORK/totals

# Every process started from here carries this marker; at exit we end any nsqd/nsqlookupd
# that carries it (a suite whose test timed out mid-setup can leak its daemon).
COMPAT_RUN_ID="$$.$(date +%s%N)"
export COMPAT_RUN_ID

stray_daemons() {
    local p pid comm
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        comm=$(cat "$p/comm" 2>/dev/null) || continue
        [[ $comm == nsqd || $comm == nsqlookupd ]] || continue
        if tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "COMPAT_RUN_ID=$COMPAT_RUN_ID"; then
            echo "$pid"
        fi
    done
}

reap() {
    local pids
    pids=$(stray_daemons)
    [[ -z $pids ]] && return 0
    log "ending daemon(s) left running by the suite: $(echo $pids)"
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    sleep 1
    pids=$(stray_daemons)
    # shellcheck disable=SC2086
    [[ -n $pids ]] && kill -KILL $pids 2>/dev/null || true
    return 0
}

cleanup() {
    reap
    rm -rf "$WORK"
}
trap cleanup EXIT

# ---- binaries ------------------------------------------------------------------------
resolve_bin() { # resolve_bin ENVVALUE NAME -> path or ""
    local v=$1 name=$2
    [[ -z $v ]] && return 0
    if [[ -d $v ]]; then
        echo "$v/$name"
    else
        echo "$v"
    fi
}

NSQD=$(resolve_bin "${NSQD_BIN:-}" nsqd)
NSQLOOKUPD=$(resolve_bin "${NSQLOOKUPD_BIN:-}" nsqlookupd)
if [[ -z $NSQD || -z $NSQLOOKUPD ]]; then
    log "building nsqd and nsqlookupd (cargo build --release)"
    (cd "$ROOT" && cargo build --release -p nsqd-bin -p nsqlookupd-bin) || die "cargo build failed"
    TARGET_DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
    [[ -z $NSQD ]] && NSQD=$TARGET_DIR/release/nsqd
    [[ -z $NSQLOOKUPD ]] && NSQLOOKUPD=$TARGET_DIR/release/nsqlookupd
fi
[[ -x $NSQD ]] || die "nsqd binary not found or not executable: $NSQD"
[[ -x $NSQLOOKUPD ]] || die "nsqlookupd binary not found or not executable: $NSQLOOKUPD"

# Copies, not symlinks: a rebuild of target/ during the run must not swap the binary
# under the suites.
BIN=$WORK/bin
mkdir -p "$BIN"
cp "$NSQD" "$BIN/nsqd"
cp "$NSQLOOKUPD" "$BIN/nsqlookupd"
export PATH="$BIN:$PATH"
[[ $(command -v nsqd) == "$BIN/nsqd" && $(command -v nsqlookupd) == "$BIN/nsqlookupd" ]] ||
    die "could not put our binaries first in PATH"
log "using $(nsqd --version 2>&1 | head -1) and $(nsqlookupd --version 2>&1 | head -1) from $BIN"

PY=$(command -v python3.11 || command -v python3) || die "python3 not found"

# ---- network isolation ---------------------------------------------------------------
# Each suite runs in its own network namespace that has only a loopback interface (see
# lib/netns_exec.py): its traffic cannot leave 127.0.0.1/::1, and nsqjs's fixed ports are
# private to it. Where namespaces are not available (no CAP_SYS_ADMIN) the suites run in
# the host's namespace instead; then the one test that dials a non-loopback address is
# deselected and nsqjs's fixed ports are checked first.
ISOLATED=0
if [[ -z ${COMPAT_NO_NETNS:-} ]] && command -v unshare >/dev/null 2>&1 &&
    unshare --net -- "$PY" "$HERE/lib/netns_exec.py" true >/dev/null 2>&1; then
    ISOLATED=1
    log "suites run in private network namespaces (loopback only)"
else
    log "NOTE: no private network namespace (COMPAT_NO_NETNS set, or unshare --net failed): suites run in the host's"
fi

isolated() { # isolated CMD... : run CMD in a fresh loopback-only netns if we can
    if [[ $ISOLATED -eq 1 ]]; then
        unshare --net -- "$PY" "$HERE/lib/netns_exec.py" "$@"
    else
        "$@"
    fi
}

# ---- gnsq ----------------------------------------------------------------------------
setup_gnsq() {
    local sdist=$CACHE/gnsq-$GNSQ_VERSION.tar.gz venv=$CACHE/venv
    if [[ ! -f $sdist ]]; then
        log "downloading gnsq $GNSQ_VERSION sdist from PyPI"
        "$PY" -m pip download -q --no-binary :all: --no-deps -d "$CACHE" "gnsq==$GNSQ_VERSION" ||
            return 1
    fi
    rm -rf "$CACHE/gnsq-$GNSQ_VERSION"
    tar xzf "$sdist" -C "$CACHE" || return 1
    [[ -f $CACHE/gnsq-$GNSQ_VERSION/tests/integration_server.py ]] || {
        log "the gnsq sdist ships no tests/"
        return 1
    }

    local want have=""
    want=$( (sha256sum "$HERE/gnsq-requirements.txt" "$sdist" && "$PY" --version) | sha256sum | cut -d' ' -f1)
    [[ -f $venv/.compat-stamp ]] && have=$(cat "$venv/.compat-stamp")
    if [[ $want != "$have" ]] || ! "$venv/bin/python" -c 'import gnsq, pytest, gevent' 2>/dev/null; then
        log "creating $venv (gnsq test dependencies + gnsq from its sdist)"
        rm -rf "$venv"
        "$PY" -m venv "$venv" || return 1
        "$venv/bin/python" -m pip install -q -r "$HERE/gnsq-requirements.txt" || return 1
        "$venv/bin/python" -m pip install -q --no-deps "$sdist" || return 1
        echo "$want" >"$venv/.compat-stamp"
    fi
}

run_gnsq() {
    local src=$CACHE/gnsq-$GNSQ_VERSION venv=$CACHE/venv out=$WORK/gnsq.json rc=0
    local min=$GNSQ_MIN_TESTS extra=()
    if [[ $ISOLATED -eq 0 ]]; then
        # it starts a Producer on 192.0.2.1:4150 (a documentation address) and expects
        # NSQNoConnections; outside a namespace that would send packets off the machine
        log "NOTE: deselecting tests/test_producer.py::test_no_connections (dials 192.0.2.1)"
        extra=(--deselect tests/test_producer.py::test_no_connections)
        min=$((min - 1))
    fi
    log "running gnsq $GNSQ_VERSION's suite (slow/integration tests included: no --fast)"
    # The console script (not `python -m pytest`) so the INSTALLED gnsq is imported, not
    # the source dir in cwd. --timeout is a backstop; the slow tests carry their own marks.
    (cd "$src" && isolated env COMPAT_RESULTS_OUT="$out" PYTHONPATH="$LIB" \
        timeout --kill-after=10 "$SUITE_TIMEOUT" "$venv/bin/pytest" \
        -p compat_pytest_report -p no:cacheprovider -v -rfE --timeout 120 "${extra[@]}" tests) ||
        rc=$?
    log "gnsq pytest exit status $rc"
    reap
    "$PY" "$LIB/evaluate.py" gnsq "$out" "$HERE/gnsq-allowlist.txt" "$min" "$TOTALS"
}

# ---- nsqjs ---------------------------------------------------------------------------
setup_nsqjs() {
    local tgz=$CACHE/nsqjs-$NSQJS_VERSION.tgz dir=$CACHE/nsqjs-$NSQJS_VERSION
    if [[ ! -f $tgz ]]; then
        log "downloading nsqjs $NSQJS_VERSION from npm"
        (cd "$CACHE" && npm pack -q "nsqjs@$NSQJS_VERSION" >/dev/null) || return 1
    fi
    mkdir -p "$dir"
    # unpack over the previous copy, keeping its node_modules
    find "$dir" -mindepth 1 -maxdepth 1 ! -name node_modules -exec rm -rf {} +
    tar xzf "$tgz" -C "$dir" --strip-components=1 || return 1
    [[ -f $dir/test/z_integration_test.js ]] || {
        log "the nsqjs tarball ships no test/"
        return 1
    }
    # Pinned dependency tree (devDependencies: mocha, should, sinon, nock, ...), made with
    # `npm install` in the unpacked package; npm ci reproduces it.
    cp "$HERE/nsqjs/package-lock.json" "$dir/package-lock.json"
    local want have=""
    want=$( (sha256sum "$dir/package-lock.json" && node --version) | sha256sum | cut -d' ' -f1)
    [[ -f $dir/node_modules/.compat-stamp ]] && have=$(cat "$dir/node_modules/.compat-stamp")
    if [[ $want != "$have" ]]; then
        log "installing nsqjs's dependencies and devDependencies (npm ci)"
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) || return 1
        echo "$want" >"$dir/node_modules/.compat-stamp"
    fi
}

# nsqjs's integration tests start nsqd on fixed ports: 4150/4151, then +50 per test.
check_nsqjs_ports() {
    "$PY" - <<'EOF'
import socket, sys
busy = []
for k in range(30):
    for port in (4150 + 50 * k, 4151 + 50 * k):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            busy.append(port)
        finally:
            s.close()
if busy:
    print("compat: ERROR nsqjs's integration tests need fixed ports 4150/4151 + 50*k "
          "(k = 0..29) on 127.0.0.1, but these are in use: %s" % busy, file=sys.stderr)
    sys.exit(1)
EOF
}

run_nsqjs() {
    local dir=$CACHE/nsqjs-$NSQJS_VERSION out=$WORK/nsqjs.json rc=0
    log "running nsqjs $NSQJS_VERSION's suite (package.json scripts.test is 'mocha -R spec -b';"
    log "  run here without -b so one failure does not hide the rest, with a spec+JSON reporter)"
    [[ $ISOLATED -eq 1 ]] && log "its fixed ports (127.0.0.1:4150/4151 + 50*k) are private to its namespace"
    (cd "$dir" && isolated env COMPAT_RESULTS_OUT="$out" \
        timeout --kill-after=10 "$SUITE_TIMEOUT" node_modules/.bin/mocha \
        --reporter "$LIB/mocha_compat_reporter.js" --exit) || rc=$?
    log "nsqjs mocha exit status $rc"
    reap
    "$PY" "$LIB/evaluate.py" nsqjs "$out" "$HERE/nsqjs-allowlist.txt" "$NSQJS_MIN_TESTS" "$TOTALS"
}

# ---- main ----------------------------------------------------------------------------
STATUS=0
: >"$TOTALS"
for suite in $SUITES; do
    case $suite in
    gnsq)
        if setup_gnsq; then
            run_gnsq || STATUS=1
        else
            log "gnsq: setup failed"
            echo "gnsq 0 0" >>"$TOTALS"
            STATUS=1
        fi
        ;;
    nsqjs)
        if ! setup_nsqjs; then
            log "nsqjs: setup failed"
            echo "nsqjs 0 0" >>"$TOTALS"
            STATUS=1
        elif [[ $ISOLATED -eq 0 ]] && ! check_nsqjs_ports; then
            echo "nsqjs 0 0" >>"$TOTALS"
            STATUS=1
        else
            run_nsqjs || STATUS=1
        fi
        ;;
    *) die "unknown suite: $suite" ;;
    esac
done

read -r PASSED FAILED < <(awk '{p += $2; f += $3} END {print p + 0, f + 0}' "$TOTALS")
if [[ $STATUS -ne 0 && $FAILED -eq 0 ]]; then
    log "a suite could not be set up or run (see above)"
    FAILED=1
fi
echo "$PASSED passed, $FAILED failed"
exit "$STATUS"
