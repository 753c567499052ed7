#!/usr/bin/env bash
# Runs the cluster of contrib/docker/docker-compose.yml without a container runtime (which
# cannot run in CI's sandbox) and checks it works as a user's `docker compose up` would:
#
#   - each nsq service (2 nsqlookupd, 3 nsqd --replicas=2, nsqadmin) in its own container of
#     the image (podman create + podman mount: its own root and /data), its own network
#     namespace and UTS namespace (hostname as in the compose file), started with the
#     compose file's command by chroot as the image's user (10001), with its own PID namespace
#     and /proc; the network namespaces are joined
#     by a bridge in one more namespace made for the check; /etc/hosts of each root names
#     the services, as compose's DNS does
#   - Prometheus: Debian's prometheus binary (the compose file's prom/prometheus image cannot
#     be pulled here) with contrib/prometheus/prometheus.yml and alerts.yml, in a namespace
#     of its own (scrape and evaluation interval lowered to 2s for the check)
#
# Checks: every /ping OK; replication links up between the three nsqd; both nsqlookupd know
# the three nsqd; 30 publishes over HTTP to two nsqd (each acknowledged by a replica); the
# image's nsq_tail, finding the nsqd through nsqlookupd, receives the 30; nsqadmin lists the
# three nodes; Prometheus (contrib/prometheus/check_prometheus_live.py): every target up, the
# alert rules loaded and healthy, every dashboard query answered. All is removed afterwards.
#
# Usage: contrib/docker/check-cluster.sh [image]   (default nsq-rs:latest; as root)
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
IMAGE=${1:-nsq-rs:latest}
TAG=ncl$$ # names of namespaces, containers: short (interface names are at most 15 bytes)
HUB=${TAG}hub
NET=10.231.0
FAILS=0
pass() { echo "cluster-check: PASS: $*"; }
fail() {
    echo "cluster-check: FAIL: $*"
    FAILS=$((FAILS + 1))
}
skip() { echo "cluster-check: SKIPPED: $*"; }

for t in podman ip curl unshare chroot /usr/bin/python3; do
    command -v "$t" >/dev/null || { fail "needs $t"; exit 1; }
done
CHROOT=$(command -v chroot)
/usr/bin/python3 -c 'import yaml' 2>/dev/null || { fail "needs PyYAML (python3-yaml)"; exit 1; }

# The nsq services of the compose file: "name<TAB>arg<TAB>arg…" (command with ${VAR:-x} as x).
mapfile -t SERVICES < <(/usr/bin/python3 - contrib/docker/docker-compose.yml <<'PY'
import re, sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
for name, svc in doc["services"].items():
    if not str(svc.get("image", "")).startswith("nsq-rs:"):
        continue
    cmd = svc["command"] if isinstance(svc["command"], list) else svc["command"].split()
    cmd = [re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(c)) for c in cmd]
    print("\t".join([name] + cmd))
PY
)
[[ ${#SERVICES[@]} -ge 6 ]] || { fail "compose file: ${#SERVICES[@]} nsq services parsed"; exit 1; }

WORK=$(mktemp -d)
NAMESPACES=()
CONTAINERS=()
cleanup() {
    local ns c
    for ns in "${NAMESPACES[@]}"; do ip netns pids "$ns" 2>/dev/null | xargs -r kill -TERM 2>/dev/null; done
    for _ in $(seq 50); do
        local left=""
        for ns in "${NAMESPACES[@]}"; do left+=$(ip netns pids "$ns" 2>/dev/null); done
        [[ -z $left ]] && break
        sleep 0.2
    done
    for ns in "${NAMESPACES[@]}"; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
        ip netns del "$ns" 2>/dev/null
        rm -rf "/etc/netns/$ns"
    done
    for c in "${CONTAINERS[@]}"; do
        podman umount "$c" >/dev/null 2>&1
        podman rm -f "$c" >/dev/null 2>&1
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

# ---- the network: a bridge in the hub namespace, a veth to each service's namespace -------
ip netns add "$HUB" || { fail "ip netns add"; exit 1; }
NAMESPACES+=("$HUB")
ip -n "$HUB" link set lo up
ip -n "$HUB" link add br0 type bridge
ip -n "$HUB" addr add "$NET.254/24" dev br0
ip -n "$HUB" link set br0 up
hosts="127.0.0.1 localhost"$'\n'
i=0
declare -A ADDR NSOF MNTOF
for line in "${SERVICES[@]}" prometheus; do
    name=${line%%$'\t'*}
    i=$((i + 1))
    ns=$TAG$i
    ip netns add "$ns"
    NAMESPACES+=("$ns")
    ip -n "$HUB" link add "v$i" type veth peer name eth0 netns "$ns"
    ip -n "$HUB" link set "v$i" master br0 up
    ip -n "$ns" addr add "$NET.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ADDR[$name]=$NET.$i
    NSOF[$name]=$ns
    hosts+="$NET.$i $name"$'\n'
done
in_hub() { ip netns exec "$HUB" "$@"; }

# ---- the nsq services, one container root each -------------------------------------------
for line in "${SERVICES[@]}"; do
    IFS=$'\t' read -r -a cmd <<<"$line"
    name=${cmd[0]}
    cmd=("${cmd[@]:1}")
    c=${TAG}-$name
    podman create --name "$c" "$IMAGE" >/dev/null || { fail "podman create $IMAGE"; exit 1; }
    CONTAINERS+=("$c")
    mnt=$(podman mount "$c") || { fail "podman mount $c"; exit 1; }
    MNTOF[$name]=$mnt
    printf '%s' "$hosts" >"$mnt/etc/hosts"
    printf 'nameserver 127.0.0.1\n' >"$mnt/etc/resolv.conf"
    # A UTS namespace for the hostname, a PID and mount namespace for the image's own /proc
    # (the daemons' process_* metrics read /proc/self), as a container runtime gives.
    ip netns exec "${NSOF[$name]}" unshare --uts --pid --fork --mount --mount-proc="$mnt/proc" -- bash -c \
        'hostname "$1"; exec env -i PATH=/usr/local/bin "$2" --userspec=10001:10001 "${@:3}"' \
        _ "$name" "$CHROOT" "$mnt" "${cmd[@]}" >"$WORK/$name.log" 2>&1 &
done
echo "cluster-check: started ${#SERVICES[@]} services from $IMAGE: $(for l in "${SERVICES[@]}"; do printf '%s ' "${l%%$'\t'*}"; done)"

port_of() {
    case $1 in lookupd*) echo 4161 ;; nsqadmin*) echo 4171 ;; *) echo 4151 ;; esac
}
NSQDS=() LOOKUPDS=()
for line in "${SERVICES[@]}"; do
    name=${line%%$'\t'*}
    case $(cut -f2 <<<"$line") in
    nsqd) NSQDS+=("$name") ;;
    nsqlookupd) LOOKUPDS+=("$name") ;;
    esac
done

# ---- /ping ------------------------------------------------------------------------------
up=1
for line in "${SERVICES[@]}"; do
    name=${line%%$'\t'*}
    answer=""
    for _ in $(seq 100); do
        answer=$(in_hub curl -s -m 1 "http://${ADDR[$name]}:$(port_of "$name")/ping") && break
        sleep 0.2
    done
    [[ $answer == OK ]] || { up=0; fail "$name /ping: '$answer'; log: $(tail -n 3 "$WORK/$name.log")"; }
done
if [[ $up == 1 ]]; then
    pass "every service answers /ping OK"
else
    for f in "$WORK"/*.log; do echo "--- $f"; tail -n 5 "$f"; done
    echo "cluster-check: $FAILS failure(s): the cluster did not come up, nothing more checked"
    exit 1
fi

# ---- replication links and lookupd registrations -----------------------------------------
wait_until() {
    # wait_until SECONDS CMD...: true once CMD is
    local end=$(($(date +%s) + $1))
    shift
    until "$@"; do
        [[ $(date +%s) -ge $end ]] && return 1
        sleep 0.5
    done
}
links_up() {
    local n p m
    for n in "${NSQDS[@]}"; do
        m=$(in_hub curl -sf -m 2 "http://${ADDR[$n]}:4151/metrics") || return 1
        for p in "${NSQDS[@]}"; do
            [[ $p == "$n" ]] && continue
            grep -q "^nsq_nsqd_replication_peer_up{peer=\"$p:4150\"} 1" <<<"$m" || return 1
        done
    done
}
if wait_until 40 links_up; then
    pass "replication: each of ${NSQDS[*]} is linked to its $((${#NSQDS[@]} - 1)) peers (--replicas=2)"
else
    fail "replication links not all up after 40 s: $(for n in "${NSQDS[@]}"; do in_hub curl -s -m 2 "http://${ADDR[$n]}:4151/metrics" | grep '^nsq_nsqd_replication_peer_up'; done | tr '\n' ' ')"
fi
lookupds_know_all() {
    local l nodes n
    for l in "${LOOKUPDS[@]}"; do
        nodes=$(in_hub curl -sf -m 2 "http://${ADDR[$l]}:4161/nodes") || return 1
        for n in "${NSQDS[@]}"; do grep -q "\"broadcast_address\":\"$n\"" <<<"$nodes" || return 1; done
    done
}
if wait_until 30 lookupds_know_all; then
    pass "${LOOKUPDS[*]} both list ${NSQDS[*]} (/nodes)"
else
    fail "nsqlookupd /nodes: $(in_hub curl -s -m 2 "http://${ADDR[${LOOKUPDS[0]}]}:4161/nodes")"
fi

# ---- publish to two nsqd, consume through nsqlookupd with the image's nsq_tail ----------
published=0
for k in $(seq 30); do
    n=${NSQDS[$((k % 2))]}
    in_hub curl -sf -m 15 --data-binary "cluster message $k" \
        "http://${ADDR[$n]}:4151/pub?topic=cluster_check" >/dev/null || break
    published=$((published + 1))
done
if [[ $published == 30 ]]; then
    pass "30 publishes to ${NSQDS[0]} and ${NSQDS[1]} acknowledged (each stored by a replica)"
else
    fail "$published of 30 publishes acknowledged"
fi
admin=""
for line in "${SERVICES[@]}"; do [[ $(cut -f2 <<<"$line") == nsqadmin ]] && admin=${line%%$'\t'*}; done
got=$(timeout 60 ip netns exec "${NSOF[$admin]}" env -i PATH=/usr/local/bin \
    "$CHROOT" --userspec=10001:10001 "${MNTOF[$admin]}" nsq_tail \
    --lookupd-http-address="${LOOKUPDS[0]}:4161" --topic=cluster_check -n 30 2>"$WORK/tail.log" |
    grep -c '^cluster message ')
if [[ $got == 30 ]]; then
    pass "the image's nsq_tail (via ${LOOKUPDS[0]}) received the 30 messages from both nsqd"
else
    fail "nsq_tail received $got of 30; its log: $(tail -n 5 "$WORK/tail.log")"
fi
nodes=$(in_hub curl -sf -m 5 "http://${ADDR[$admin]}:4171/api/nodes")
if [[ $(grep -o '"broadcast_address":"nsqd-[0-9]*"' <<<"$nodes" | sort -u | wc -l) == "${#NSQDS[@]}" ]]; then
    pass "nsqadmin /api/nodes lists the ${#NSQDS[@]} nsqd"
else
    fail "nsqadmin /api/nodes: $nodes"
fi

# ---- Prometheus with contrib/prometheus --------------------------------------------------
if ! command -v prometheus >/dev/null; then
    skip "Prometheus: no prometheus binary here (Debian package prometheus)"
else
    pdir=$WORK/prometheus
    mkdir -p "$pdir/data" "/etc/netns/${NSOF[prometheus]}"
    sed -e 's/^\(  scrape_interval:\).*/\1 2s/' -e 's/^\(  evaluation_interval:\).*/\1 2s/' \
        contrib/prometheus/prometheus.yml >"$pdir/prometheus.yml"
    cp contrib/prometheus/alerts.yml "$pdir/"
    printf '%s' "$hosts" >"/etc/netns/${NSOF[prometheus]}/hosts"
    ip netns exec "${NSOF[prometheus]}" prometheus --config.file="$pdir/prometheus.yml" \
        --storage.tsdb.path="$pdir/data" --web.listen-address="${ADDR[prometheus]}:9090" \
        >"$WORK/prometheus.log" 2>&1 &
    if in_hub /usr/bin/python3 contrib/prometheus/check_prometheus_live.py \
        "http://${ADDR[prometheus]}:9090" "${#SERVICES[@]}" "${#NSQDS[@]}"; then
        pass "Prometheus ($(prometheus --version 2>&1 | head -n 1 | cut -d' ' -f1-3)) with contrib/prometheus/{prometheus,alerts}.yml scrapes the cluster; dashboard queries answered"
    else
        fail "Prometheus checks; its log: $(tail -n 5 "$WORK/prometheus.log")"
    fi
fi

[[ $FAILS == 0 ]] || for f in "$WORK"/*.log; do echo "--- $f"; tail -n 5 "$f"; done
cleanup
trap - EXIT
echo "cluster-check: $FAILS failure(s)"
[[ $FAILS -eq 0 ]]
