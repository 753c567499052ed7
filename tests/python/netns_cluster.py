"""Hosts for black-box tests across "machines": network namespaces joined by a bridge, with
daemons and clients started inside them. Used by test_cluster_netns.py (the NSQ cluster) and
test_replication_netns.py (replication between nsqd).

    ns <prefix>sw:  bridge br0 with one veth port per host
    ns <prefix>X:   eth0 <SUBNET>.<n>/24 for host X

The addresses exist only inside the namespaces a test creates (names carry the test's PID), so
no traffic leaves them; `Cluster.cleanup` removes the namespaces and every process even when
the test fails. Root only (namespaces need CAP_SYS_ADMIN).
"""

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT, nsqd_binary

CLIENT = Path(__file__).resolve().parent / "cluster_client.py"
TOPIC = "cluster"
SUBNET = "10.231.0"
# nsqd PINGs its lookupds every 15 s (nsqd/lookup.go, lookupLoop); producers not heard from
# for longer than this are hidden by /lookup (nsqlookupd/registration_db.go, FilterByActive).
INACTIVE_TIMEOUT = 20
# Generous: CI is a loaded 2-core machine.
WAIT = 30.0


def nsqlookupd_binary():
    env = os.environ.get("NSQLOOKUPD_BIN")
    if env:
        return Path(env)
    for profile in ("release", "debug"):
        candidate = REPO_ROOT / "target" / profile / "nsqlookupd"
        if candidate.exists():
            return candidate
    return None


def run(*cmd, check=True):
    """Runs a command to completion; returns stdout (text)."""
    p = subprocess.run(
        [str(c) for c in cmd],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({p.returncode}): {p.stderr}")
    return p.stdout


class Pending(str):
    """A predicate's "not yet", with the reason shown if the wait times out."""


def wait_for(what, predicate, timeout=WAIT, interval=0.2):
    """Polls `predicate` until it returns a truthy value; returns it, fails on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = predicate()
        except Exception as e:  # noqa: BLE001 - a failing probe just means "not yet"
            last = e
        if last and not isinstance(last, (Exception, Pending)):
            return last
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


class Host:
    """A network namespace with one address on the bridge."""

    def __init__(self, cluster, name, index):
        self.cluster = cluster
        self.ns = f"{cluster.prefix}{name}"
        self.name = name
        self.port = f"p{name}"  # its veth's end on the bridge
        self.ip = f"{SUBNET}.{index}"

    def exec_args(self, *cmd):
        return ["ip", "netns", "exec", self.ns, *map(str, cmd)]

    def curl(self, url, *extra):
        """HTTP from inside this namespace; returns the body (fails on HTTP errors)."""
        return run(*self.exec_args("curl", "-sS", "--fail", "-m", "5", *extra, url))


class Proc:
    """A process started inside a namespace; stdout lines are collected by a thread."""

    def __init__(self, host, name, cmd, log_dir, capture=False):
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.log = open(self.log_path, "wb")
        self.lines = []
        self.lock = threading.Lock()
        # `ip netns exec` execs the command: the child's PID is the daemon's.
        self.proc = subprocess.Popen(
            host.exec_args(*cmd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if capture else self.log,
            stderr=self.log,
        )
        if capture:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in iter(self.proc.stdout.readline, b""):
            with self.lock:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def messages(self):
        with self.lock:
            return [line[4:] for line in self.lines if line.startswith("MSG ")]

    def connections(self):
        with self.lock:
            return {line[5:] for line in self.lines if line.startswith("CONN ")}

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def tail(self, n=30):
        self.log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        with self.lock:
            out = [line for line in self.lines if not line.startswith("MSG ")][-n:]
            msgs = sum(1 for line in self.lines if line.startswith("MSG "))
        if self.lines:
            out.append(f"({msgs} MSG lines)")
        return "\n".join(text[-n:] + out)


class Cluster:
    """Hosts `names` (host n gets address <SUBNET>.n) on one bridge; `tag` keeps the namespace
    names of different tests apart."""

    def __init__(self, tmp_path, names="abcd", tag="c"):
        self.prefix = f"nsq{tag}{os.getpid()}"
        self.tmp = tmp_path
        self.procs = []
        self.namespaces = []
        self.sw = f"{self.prefix}sw"
        self.hosts = {name: Host(self, name, i + 1) for i, name in enumerate(names)}

    # -- network -------------------------------------------------------------------------
    def build_network(self):
        run("ip", "netns", "add", self.sw)
        self.namespaces.append(self.sw)
        run("ip", "-n", self.sw, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", self.sw, "link", "set", "br0", "up")
        for h in self.hosts.values():
            run("ip", "netns", "add", h.ns)
            self.namespaces.append(h.ns)
            run("ip", "-n", self.sw, "link", "add", h.port, "type", "veth",
                "peer", "name", "eth0", "netns", h.ns)
            run("ip", "-n", self.sw, "link", "set", h.port, "master", "br0")
            run("ip", "-n", self.sw, "link", "set", h.port, "up")
            run("ip", "-n", h.ns, "addr", "add", f"{h.ip}/24", "dev", "eth0")
            run("ip", "-n", h.ns, "link", "set", "eth0", "up")
            run("ip", "-n", h.ns, "link", "set", "lo", "up")
            # Cap TCP's retransmission backoff (Linux >= 6.11) so a healed link carries
            # data again within a second, and allow enough retransmissions that connections
            # survive the cut as they would with the default backoff. Best effort: older
            # kernels lack tcp_rto_max_ms and keep the (slower) default backoff.
            run(*h.exec_args("sysctl", "-qw", "net.ipv4.tcp_retries2=120"), check=False)
            run(*h.exec_args("sysctl", "-qw", "net.ipv4.tcp_rto_max_ms=1000"), check=False)

    def set_link(self, host, up):
        run("ip", "-n", self.sw, "link", "set", host.port, "up" if up else "down")

    # -- processes -----------------------------------------------------------------------
    def start(self, host, name, cmd, capture=False):
        p = Proc(host, name, cmd, self.tmp, capture=capture)
        self.procs.append(p)
        return p

    def start_lookupd(self, host):
        p = self.start(host, f"nsqlookupd-{host.name}", [
            nsqlookupd_binary(),
            "--tcp-address=0.0.0.0:4160",
            "--http-address=0.0.0.0:4161",
            f"--broadcast-address={host.ip}",
            f"--inactive-producer-timeout={INACTIVE_TIMEOUT}s",
        ])
        wait_for(f"{p.name} /ping", lambda: host.curl(f"http://{host.ip}:4161/ping") == "OK")
        return p

    def start_nsqd(self, host, node_id, lookupds, extra=(), name=None):
        """nsqd on `host` (data in <tmp>/data-<host>, kept across restarts); `extra` flags."""
        data = self.tmp / f"data-{host.name}"
        data.mkdir(exist_ok=True)
        p = self.start(host, name or f"nsqd-{host.name}", [
            nsqd_binary(),
            "--tcp-address=0.0.0.0:4150",
            "--http-address=0.0.0.0:4151",
            f"--broadcast-address={host.ip}",
            f"--node-id={node_id}",
            f"--data-path={data}",
            # Everything through the disk queue: what a cut-off host holds is persisted.
            "--mem-queue-size=0",
            *(f"--lookupd-tcp-address={lh.ip}:4160" for lh in lookupds),
            *extra,
        ])
        wait_for(f"{p.name} /ping", lambda: host.curl(f"http://{host.ip}:4151/ping") == "OK")
        return p

    def consumer(self, channel, lookupds, host="d", topic=TOPIC):
        return self.start(self.hosts[host], f"consumer-{channel}", [
            sys.executable, CLIENT, "consume", f"--topic={topic}", f"--channel={channel}",
            *(f"--lookupd=http://{h.ip}:4161" for h in lookupds),
        ], capture=True)

    def publish(self, host, prefix, count, topic=TOPIC, nsqd="127.0.0.1:4150"):
        """Publishes `count` bodies from `host` to `nsqd` (its own by default); returns them."""
        out = run(*host.exec_args(
            sys.executable, CLIENT, "produce", f"--nsqd={nsqd}", f"--topic={topic}",
            f"--prefix={prefix}", f"--count={count}",
        ))
        assert f"PUBLISHED {count}" in out, out
        return [f"{prefix}{i}" for i in range(count)]

    def cleanup(self):
        for p in self.procs:
            try:
                p.kill()
            except Exception:  # noqa: BLE001 - keep cleaning up
                pass
            p.log.close()
        for ns in reversed(self.namespaces):
            run("ip", "netns", "del", ns, check=False)

    def logs(self):
        out = [f"--- {p.name} (last lines)\n{p.tail()}" for p in self.procs]
        for h in self.hosts.values():
            try:
                stats = h.curl(f"http://{h.ip}:4151/stats?format=json&topic={TOPIC}")
                out.append(f"--- /stats of nsqd {h.name}\n{stats}")
            except Exception:  # noqa: BLE001 - no nsqd there (any more)
                pass
        return "\n".join(out)


def lookup_producers(via, lookupd_host):
    """The broadcast addresses `/lookup?topic=` of a lookupd lists (as seen from `via`)."""
    body = via.curl(f"http://{lookupd_host.ip}:4161/lookup?topic={TOPIC}")
    return sorted({p["broadcast_address"] for p in json.loads(body)["producers"]})


def channel_stats(host, channel):
    """`channel` of TOPIC in `host`'s nsqd /stats (None if it does not exist)."""
    body = host.curl(f"http://{host.ip}:4151/stats?format=json&topic={TOPIC}&channel={channel}")
    for t in json.loads(body).get("topics", []):
        for c in t.get("channels", []):
            if c["channel_name"] == channel:
                return c
    return None


def channel_clients(host, channel):
    """How many clients `channel` of TOPIC has on `host`'s nsqd (0 if it does not exist)."""
    c = channel_stats(host, channel)
    return len(c.get("clients") or []) if c else 0


def held_messages(host, channel):
    """Messages `host`'s nsqd holds for `channel`: queued (memory + disk) plus in flight."""
    c = channel_stats(host, channel)
    return c["depth"] + c["in_flight_count"] if c else 0


def wait_exactly_once(consumer, expected, timeout=WAIT):
    """Waits until `consumer` got every body in `expected`; then checks none came twice."""
    expected = set(expected)

    def missing():
        gone = sorted(expected - set(consumer.messages()))
        return f"{len(gone)} missing, e.g. {gone[:5]}" if gone else None

    wait_for(
        f"{consumer.name} to receive {len(expected)} messages",
        lambda: Pending(missing()) if missing() else True,
        timeout=timeout,
    )
    counts = collections.Counter(consumer.messages())
    dups = {m: n for m, n in counts.items() if n > 1}
    assert not dups, f"{consumer.name} got duplicates: {sorted(dups.items())[:10]}"
