#!/usr/bin/env bash
# Checks the Debian package made by contrib/deb/build.sh, on this machine (as root; CI's
# machine is a throwaway one). Installs it and removes it again:
#
#   1. lintian: no error (warnings and infos are listed, they do not fail)
#   2. dpkg -i; the nine binaries in /usr/bin, `/usr/bin/nsqd --version`; the user nsq and
#      /var/lib/nsqd (owned by nsq) made by postinst; conffiles in /etc/nsq
#   3. systemd-analyze verify of the installed units (SKIPPED with the reason when
#      systemd-analyze cannot verify even a trivial unit here)
#   4. the three daemons started as user nsq with the installed /etc/nsq/*.cfg, in a network
#      namespace made for the check (loopback only): /ping of each answers OK
#   5. dpkg -r keeps /var/lib/nsqd's data and the conffiles; dpkg -P removes the conffiles and
#      still keeps the data
#   6. clean-up: the package, and the user nsq and /var/lib/nsqd when this check made them
#
# Each step prints PASS, FAIL or SKIPPED (reason); the exit status is 1 on any FAIL.
# Usage: contrib/deb/check.sh path/to/nsq-rs_<version>_<arch>.deb
set -uo pipefail

DEB=$(realpath "$1")
BINS=(nsqd nsqlookupd nsqadmin nsq_stat nsq_tail nsq_to_file nsq_to_http nsq_to_nsq to_nsq)
DAEMONS=(nsqd nsqlookupd nsqadmin)
FAILS=0
pass() { echo "deb-check: PASS: $*"; }
fail() {
    echo "deb-check: FAIL: $*"
    FAILS=$((FAILS + 1))
}
skip() { echo "deb-check: SKIPPED: $*"; }

if [[ $(id -u) != 0 ]]; then
    fail "must run as root (dpkg -i)"
    exit 1
fi
if dpkg-query -W -f='${Status}' nsq-rs 2>/dev/null | grep -q 'installed'; then
    fail "nsq-rs is already installed on this machine: not touching it (dpkg -P nsq-rs first)"
    exit 1
fi

# ---- 1. lintian ----------------------------------------------------------------------
if ! command -v lintian >/dev/null; then
    fail "lintian is not installed (apt-get install lintian)"
else
    out=$(lintian --allow-root --no-tag-display-limit --display-info "$DEB" 2>&1)
    rc=$?
    errors=$(grep -c '^E: ' <<<"$out")
    warnings=$(grep -c '^W: ' <<<"$out")
    grep -E '^[EWI]: ' <<<"$out" | sed 's/^/deb-check:   lintian /'
    if [[ $errors -gt 0 || $rc -ne 0 ]]; then
        fail "lintian: $errors error(s), $warnings warning(s) (exit $rc)"
        [[ $errors -eq 0 ]] && echo "$out" | tail -n 20
    else
        pass "lintian: 0 errors, $warnings warning(s) ($(lintian --version))"
    fi
fi

# ---- 2. install ----------------------------------------------------------------------
had_user=0 had_data=0
getent passwd nsq >/dev/null && had_user=1
[[ -e /var/lib/nsqd ]] && had_data=1
NS=""
cleanup() {
    [[ -n $NS ]] && ip netns pids "$NS" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    [[ -n $NS ]] && ip netns del "$NS" 2>/dev/null
    if dpkg-query -W -f='${Status}' nsq-rs 2>/dev/null | grep -q 'installed\|config-files'; then
        dpkg -P nsq-rs >/dev/null 2>&1
    fi
    [[ $had_data == 0 ]] && rm -rf /var/lib/nsqd
    if [[ $had_user == 0 ]] && getent passwd nsq >/dev/null; then
        userdel nsq 2>/dev/null
        getent group nsq >/dev/null && groupdel nsq 2>/dev/null
    fi
}
trap cleanup EXIT

if ! out=$(dpkg -i "$DEB" 2>&1); then
    fail "dpkg -i: $out"
    exit 1
fi
pass "dpkg -i $(basename "$DEB")"
missing=()
for b in "${BINS[@]}"; do [[ -x /usr/bin/$b ]] || missing+=("$b"); done
if [[ ${#missing[@]} -eq 0 ]]; then pass "the nine binaries are in /usr/bin"; else fail "missing in /usr/bin: ${missing[*]}"; fi
if v=$(/usr/bin/nsqd --version 2>&1) && [[ $v == "nsqd v"* ]]; then
    pass "/usr/bin/nsqd --version: $v"
else
    fail "/usr/bin/nsqd --version: $v"
fi
if getent passwd nsq >/dev/null && [[ $(stat -c %U:%G /var/lib/nsqd 2>/dev/null) == nsq:nsq ]]; then
    pass "postinst: system user nsq ($(getent passwd nsq)), /var/lib/nsqd owned by nsq:nsq"
else
    fail "postinst: user nsq or /var/lib/nsqd missing (owner: $(stat -c %U:%G /var/lib/nsqd 2>&1))"
fi
if [[ $(dpkg-query -W -f='${Conffiles}' nsq-rs | awk 'NF{print $1}' | sort | tr '\n' ' ') == \
    "/etc/nsq/nsqadmin.cfg /etc/nsq/nsqd.cfg /etc/nsq/nsqlookupd.cfg " ]]; then
    pass "conffiles: /etc/nsq/{nsqadmin,nsqd,nsqlookupd}.cfg"
else
    fail "conffiles: $(dpkg-query -W -f='${Conffiles}' nsq-rs)"
fi

# ---- 3. systemd-analyze verify -------------------------------------------------------
units=()
for d in "${DAEMONS[@]}"; do units+=("/lib/systemd/system/$d.service"); done
if ! command -v systemd-analyze >/dev/null; then
    skip "systemd-analyze verify: systemd-analyze is not installed (package systemd)"
else
    probe=$(mktemp -d)
    printf '[Unit]\nDescription=probe\n[Service]\nType=exec\nExecStart=/bin/true\n' >"$probe/ship-probe.service"
    if ! pout=$(systemd-analyze verify "$probe/ship-probe.service" 2>&1); then
        skip "systemd-analyze verify: it fails here even on a trivial unit: $(head -n 3 <<<"$pout" | tr '\n' ' ')"
    else
        out=$(systemd-analyze verify "${units[@]}" 2>&1)
        rc=$?
        # Only lines about our units count; systemd also reports unrelated units of the host.
        ours=$(grep -E 'nsq(d|lookupd|admin)\.service' <<<"$out")
        if [[ $rc -eq 0 && -z $ours ]]; then
            pass "systemd-analyze verify ${units[*]} ($(systemd-analyze --version | head -n 1))"
        else
            fail "systemd-analyze verify (exit $rc): $out"
        fi
    fi
    rm -rf "$probe"
fi

# ---- 4. the daemons with the installed configs, as nsq, in a network namespace ------
if ! command -v ip >/dev/null || ! command -v curl >/dev/null; then
    skip "daemons from /etc/nsq/*.cfg: needs ip (iproute2) and curl"
elif ! ip netns add "nsqdeb$$" 2>/dev/null; then
    skip "daemons from /etc/nsq/*.cfg: cannot create a network namespace here (ip netns add)"
else
    NS=nsqdeb$$
    ip -n "$NS" link set lo up
    for d in nsqlookupd nsqd nsqadmin; do
        ip netns exec "$NS" runuser -u nsq -- sh -c \
            "cd /var/lib/nsqd && exec /usr/bin/$d --config=/etc/nsq/$d.cfg" \
            >"/tmp/nsqdeb$$.$d.log" 2>&1 &
    done
    ok=1
    for port in 4161 4151 4171; do
        answer=""
        for _ in $(seq 50); do
            answer=$(ip netns exec "$NS" curl -s -m 1 "http://127.0.0.1:$port/ping") && break
            sleep 0.2
        done
        if [[ $answer != OK ]]; then
            ok=0
            fail "daemon on :$port with /etc/nsq config: /ping answered '$answer'"
        fi
    done
    if [[ $ok == 1 ]] && ip netns exec "$NS" curl -sf -m 2 -d hello \
        "http://127.0.0.1:4151/pub?topic=deb_check" >/dev/null; then
        pass "nsqlookupd, nsqd, nsqadmin started as user nsq with /etc/nsq/*.cfg: /ping OK, a PUB accepted"
    elif [[ $ok == 1 ]]; then
        fail "PUB to the packaged nsqd failed"
    fi
    [[ $ok == 1 ]] || tail -n 5 /tmp/nsqdeb$$.*.log
    ip netns pids "$NS" | xargs -r kill -TERM
    for _ in $(seq 50); do [[ -z $(ip netns pids "$NS") ]] && break; sleep 0.2; done
    ip netns pids "$NS" | xargs -r kill -KILL
    ip netns del "$NS"
    NS=""
    rm -f /tmp/nsqdeb$$.*.log
fi

# ---- 5. remove keeps the data; purge removes the conffiles and keeps the data ---------
runuser -u nsq -- touch /var/lib/nsqd/deb-check.keep
if ! out=$(dpkg -r nsq-rs 2>&1); then
    fail "dpkg -r: $out"
elif [[ -e /usr/bin/nsqd ]]; then
    fail "dpkg -r left /usr/bin/nsqd"
elif [[ ! -e /var/lib/nsqd/deb-check.keep || ! -e /etc/nsq/nsqd.cfg ]]; then
    fail "dpkg -r removed data in /var/lib/nsqd or the conffiles"
else
    pass "dpkg -r: binaries gone, /var/lib/nsqd ($(ls /var/lib/nsqd | wc -l) entries) and /etc/nsq kept"
fi
if ! out=$(dpkg -P nsq-rs 2>&1); then
    fail "dpkg -P: $out"
elif [[ -e /etc/nsq/nsqd.cfg || ! -e /var/lib/nsqd/deb-check.keep ]]; then
    fail "dpkg -P: conffiles left or data removed"
else
    pass "dpkg -P: conffiles gone, data in /var/lib/nsqd kept"
fi

cleanup
trap - EXIT
if getent passwd nsq >/dev/null && [[ $had_user == 0 ]]; then fail "clean-up: user nsq left"; fi
echo "deb-check: $FAILS failure(s)"
[[ $FAILS -eq 0 ]]
