#!/usr/bin/env bash
# Checks the image made by contrib/docker/build.sh without running a container runtime
# (`podman run` cannot run in CI's sandbox: crun's setrlimit is refused): the image's root is
# mounted (`podman create` + `podman mount`) and its programs run with chroot, as the image's
# user (10001):
#
#   1. the image's config: user 10001, volume /data (owned by 10001), the five NSQ ports
#   2. each of the nine binaries from the image's root: `--version` (to_nsq: `-help`)
#   3. nsqlookupd and nsqd from the image's root, in a network namespace made for the check
#      (loopback only): a PUB over HTTP, then the image's nsq_tail, finding nsqd through
#      nsqlookupd, prints that message (-n 1)
#   4. clean-up: the namespace, the daemons, the mount and the container
#
# Each step prints PASS, FAIL or SKIPPED (reason); the exit status is 1 on any FAIL.
# Usage: contrib/docker/check.sh [image]   (default nsq-rs:latest)
set -uo pipefail

IMAGE=${1:-nsq-rs:latest}
BINS=(nsqd nsqlookupd nsqadmin nsq_stat nsq_tail nsq_to_file nsq_to_http nsq_to_nsq to_nsq)
FAILS=0
pass() { echo "image-check: PASS: $*"; }
fail() {
    echo "image-check: FAIL: $*"
    FAILS=$((FAILS + 1))
}
skip() { echo "image-check: SKIPPED: $*"; }

if ! command -v podman >/dev/null; then
    fail "podman is not installed (apt-get install podman)"
    exit 1
fi

# ---- 1. config -----------------------------------------------------------------------
cfg=$(podman image inspect --format '{{.Config.User}}|{{range $k, $v := .Config.Volumes}}{{$k}} {{end}}|{{range $k, $v := .Config.ExposedPorts}}{{$k}} {{end}}' "$IMAGE" 2>&1)
user=${cfg%%|*}
rest=${cfg#*|}
volumes=${rest%%|*}
ports=$(tr ' ' '\n' <<<"${rest#*|}" | sort | tr '\n' ' ')
if [[ $user == 10001:10001 && $volumes == "/data " &&
    $ports == " 4150/tcp 4151/tcp 4160/tcp 4161/tcp 4171/tcp " ]]; then
    pass "image $IMAGE: user $user, volume $volumes, ports$ports"
else
    fail "image $IMAGE config: user '$user', volumes '$volumes', ports '$ports' ($cfg)"
fi

CTR=nsqship-check-$$
NS=""
MNT=""
cleanup() {
    if [[ -n $NS ]]; then
        ip netns pids "$NS" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
        ip netns del "$NS" 2>/dev/null
    fi
    if [[ -n $MNT ]]; then
        podman umount "$CTR" >/dev/null 2>&1
    fi
    podman rm -f "$CTR" >/dev/null 2>&1
}
trap cleanup EXIT

if ! podman create --name "$CTR" "$IMAGE" >/dev/null 2>&1; then
    fail "podman create $IMAGE: $(podman create --name "$CTR-2" "$IMAGE" 2>&1 | tail -n 1)"
    exit 1
fi
if ! MNT=$(podman mount "$CTR" 2>&1) || [[ ! -d $MNT/usr/local/bin ]]; then
    fail "podman mount: $MNT"
    MNT=""
    exit 1
fi
in_image() { chroot --userspec=10001:10001 "$MNT" "$@"; }

if [[ $(stat -c %u:%g "$MNT/data") == 10001:10001 ]]; then
    pass "/data in the image is owned by 10001:10001"
else
    fail "/data in the image is owned by $(stat -c %u:%g "$MNT/data")"
fi

# ---- 2. the nine binaries ------------------------------------------------------------
n=0
for b in "${BINS[@]}"; do
    if [[ $b == to_nsq ]]; then
        out=$(in_image /usr/local/bin/to_nsq -help 2>&1) && grep -q -- '-nsqd-tcp-address' <<<"$out" &&
            n=$((n + 1)) || fail "to_nsq -help from the image: $out"
    else
        out=$(in_image "/$b" --version 2>&1) && [[ $out == "$b v"* ]] && n=$((n + 1)) ||
            fail "$b --version from the image: $out"
    fi
done
[[ $n == 9 ]] && pass "the nine binaries run from the image's root as uid 10001 ($(in_image /nsqd --version))"

# ---- 3. nsqlookupd + nsqd in a network namespace: PUB, then nsq_tail -n 1 ------------
if ! command -v ip >/dev/null || ! command -v curl >/dev/null; then
    skip "daemons from the image: needs ip (iproute2) and curl"
elif ! ip netns add "nsqimg$$" 2>/dev/null; then
    skip "daemons from the image: cannot create a network namespace here (ip netns add)"
else
    NS=nsqimg$$
    ip -n "$NS" link set lo up
    log=$(mktemp -d)
    ip netns exec "$NS" chroot --userspec=10001:10001 "$MNT" /usr/local/bin/nsqlookupd \
        --tcp-address=127.0.0.1:4160 --http-address=127.0.0.1:4161 >"$log/nsqlookupd" 2>&1 &
    ip netns exec "$NS" chroot --userspec=10001:10001 "$MNT" /usr/local/bin/nsqd \
        --data-path=/data --tcp-address=127.0.0.1:4150 --http-address=127.0.0.1:4151 \
        --broadcast-address=127.0.0.1 --lookupd-tcp-address=127.0.0.1:4160 >"$log/nsqd" 2>&1 &
    up=1
    for port in 4161 4151; do
        answer=""
        for _ in $(seq 50); do
            answer=$(ip netns exec "$NS" curl -s -m 1 "http://127.0.0.1:$port/ping") && break
            sleep 0.2
        done
        [[ $answer == OK ]] || { up=0; fail "daemon on :$port from the image: /ping '$answer'"; }
    done
    if [[ $up == 1 ]]; then
        msg="image-check $$ $(date +%s%N)"
        if ! ip netns exec "$NS" curl -sf -m 2 --data-binary "$msg" \
            "http://127.0.0.1:4151/pub?topic=image_check" >/dev/null; then
            fail "PUB to nsqd from the image"
        else
            # nsqd registers the topic with nsqlookupd; nsq_tail finds it there.
            for _ in $(seq 50); do
                ip netns exec "$NS" curl -sf -m 1 "http://127.0.0.1:4161/lookup?topic=image_check" |
                    grep -q '"broadcast_address":"127.0.0.1"' && break
                sleep 0.2
            done
            got=$(timeout 30 ip netns exec "$NS" chroot --userspec=10001:10001 "$MNT" \
                /usr/local/bin/nsq_tail --lookupd-http-address=127.0.0.1:4161 \
                --topic=image_check -n 1 2>"$log/nsq_tail")
            if [[ $got == "$msg" ]]; then
                pass "nsqlookupd + nsqd from the image in netns $NS: PUB over HTTP, the image's nsq_tail -n 1 (via nsqlookupd) printed it"
            else
                fail "nsq_tail from the image printed '$got' (want '$msg'); its log: $(tail -n 5 "$log/nsq_tail")"
            fi
        fi
    fi
    [[ $FAILS == 0 ]] || tail -n 5 "$log"/*
    ip netns pids "$NS" | xargs -r kill -TERM
    for _ in $(seq 50); do [[ -z $(ip netns pids "$NS") ]] && break; sleep 0.2; done
    ip netns pids "$NS" | xargs -r kill -KILL
    ip netns del "$NS"
    NS=""
    rm -rf "$log"
fi

cleanup
MNT=""
trap - EXIT
if podman container exists "$CTR" 2>/dev/null; then fail "clean-up: container $CTR left"; fi
echo "image-check: $FAILS failure(s)"
[[ $FAILS -eq 0 ]]
