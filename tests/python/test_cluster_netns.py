"""A cluster across "hosts": three nsqd and two nsqlookupd in separate network namespaces,
joined by a bridge, with a gnsq consumer on a fourth namespace discovering through both
lookupds. See the README's "Cluster" section for the topology.

    ns <sw>:  bridge br0 with ports pa pb pc pd (veths)
    ns <a>:   eth0 10.231.0.1/24   nsqd (node 1) + nsqlookupd #1
    ns <b>:   eth0 10.231.0.2/24   nsqd (node 2) + nsqlookupd #2
    ns <c>:   eth0 10.231.0.3/24   nsqd (node 3)
    ns <d>:   eth0 10.231.0.4/24   consumers (gnsq, via both lookupds)

Every nsqd runs with `--broadcast-address=<its own address>` and registers with both lookupds;
each host publishes to its own nsqd through 127.0.0.1. The addresses exist only inside the
namespaces the test creates (names carry the test's PID), so no traffic leaves them; the
namespaces and every process are removed even when the test fails.

Root only (creating namespaces needs CAP_SYS_ADMIN); skipped with a message otherwise. CI runs
as root and installs iproute2. Scenarios, in order, on one cluster (~30 s):
  1. every message published on every host arrives exactly once;
  2. an nsqd tombstoned on one lookupd is still found through the other;
  3. an nsqd killed with SIGKILL: lookupds drop it, consumers carry on with the others;
  4. a host cut off (its link down): lookupds hide it after --inactive-producer-timeout;
     messages published on it meanwhile are delivered once the link is back, and it is
     listed again (re-registered);
  5. a lookupd killed: a new consumer discovers every live nsqd through the other.
"""

import collections
import json
import os
import shutil
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
    def __init__(self, tmp_path):
        self.prefix = f"nsqc{os.getpid()}"
        self.tmp = tmp_path
        self.procs = []
        self.namespaces = []
        self.sw = f"{self.prefix}sw"
        self.hosts = {name: Host(self, name, i + 1) for i, name in enumerate("abcd")}

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

    def start_nsqd(self, host, node_id, lookupds):
        data = self.tmp / f"data-{host.name}"
        data.mkdir()
        p = self.start(host, f"nsqd-{host.name}", [
            nsqd_binary(),
            "--tcp-address=0.0.0.0:4150",
            "--http-address=0.0.0.0:4151",
            f"--broadcast-address={host.ip}",
            f"--node-id={node_id}",
            f"--data-path={data}",
            # Everything through the disk queue: what a cut-off host holds is persisted.
            "--mem-queue-size=0",
            *(f"--lookupd-tcp-address={lh.ip}:4160" for lh in lookupds),
        ])
        wait_for(f"{p.name} /ping", lambda: host.curl(f"http://{host.ip}:4151/ping") == "OK")
        return p

    def consumer(self, channel, lookupds):
        return self.start(self.hosts["d"], f"consumer-{channel}", [
            sys.executable, CLIENT, "consume", f"--topic={TOPIC}", f"--channel={channel}",
            *(f"--lookupd=http://{h.ip}:4161" for h in lookupds),
        ], capture=True)

    def publish(self, host, prefix, count):
        """Publishes `count` bodies on `host` through its own nsqd; returns them."""
        out = run(*host.exec_args(
            sys.executable, CLIENT, "produce", "--nsqd=127.0.0.1:4150", f"--topic={TOPIC}",
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


@pytest.fixture
def cluster(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the network-namespace cluster test needs root (CI runs it as root)")
    for tool in ("ip", "curl"):
        if shutil.which(tool) is None:
            pytest.skip(f"`{tool}` not found (.ci/run installs iproute2 and curl)")
    if nsqd_binary() is None or nsqlookupd_binary() is None:
        pytest.fail("build the daemons first: cargo build -p nsqd-bin -p nsqlookupd-bin")
    c = Cluster(tmp_path)
    try:
        c.build_network()
        yield c
    finally:
        c.cleanup()


def test_cluster_across_network_namespaces(cluster):
    try:
        scenarios(cluster)
    except BaseException:
        # The daemons' and clients' logs, shown by pytest for the failed test.
        print(cluster.logs())
        raise


def scenarios(c):
    a, b, hc, d = (c.hosts[n] for n in "abcd")
    lookupds = [a, b]
    nsqd_hosts = [a, b, hc]
    started = time.monotonic()

    lookupd_a = c.start_lookupd(a)
    c.start_lookupd(b)
    nsqds = {h.name: c.start_nsqd(h, i + 1, lookupds) for i, h in enumerate(nsqd_hosts)}
    for h in nsqd_hosts:
        h.curl(f"http://{h.ip}:4151/topic/create?topic={TOPIC}", "-X", "POST")
    every_ip = sorted(h.ip for h in nsqd_hosts)
    for lh in lookupds:
        wait_for(f"all nsqd in /lookup of {lh.ip}", lambda lh=lh: lookup_producers(d, lh) == every_ip)

    # 1. Messages from every host arrive exactly once.
    c1 = c.consumer("c1", lookupds)
    wait_for("c1 connected to every nsqd", lambda: all(channel_clients(h, "c1") == 1 for h in nsqd_hosts))
    sent = []
    for h in nsqd_hosts:
        sent += c.publish(h, f"p1-{h.name}-", 200)
    wait_exactly_once(c1, sent)

    # 2. A tombstone on lookupd a hides nsqd a there only; discovery through lookupd b
    # still finds it.
    a.curl(f"http://{a.ip}:4161/topic/tombstone?topic={TOPIC}&node={a.ip}:4151", "-X", "POST")
    assert lookup_producers(d, a) == [b.ip, hc.ip]
    assert lookup_producers(d, b) == every_ip
    c2 = c.consumer("c2", lookupds)
    wait_for("c2 connected to every nsqd (a through lookupd b)",
             lambda: all(channel_clients(h, "c2") == 1 for h in nsqd_hosts))

    # 3. SIGKILL nsqd b: both lookupds drop it (its connections close; at the latest after
    # --inactive-producer-timeout), the consumers carry on with a and c.
    nsqds["b"].kill(signal.SIGKILL)
    for lh in lookupds:
        wait_for(f"lookupd {lh.ip} to drop nsqd b",
                 lambda lh=lh: b.ip not in lookup_producers(d, lh), timeout=INACTIVE_TIMEOUT + 10)
    p3 = c.publish(a, "p3-a-", 100) + c.publish(hc, "p3-c-", 100)
    sent += p3
    wait_exactly_once(c1, sent)
    wait_exactly_once(c2, p3)
    # The consumers print a message before they FIN it: wait for the FINs to land.
    for ch in ("c1", "c2"):
        wait_for(f"nsqd c to have no message left for {ch}", lambda ch=ch: held_messages(hc, ch) == 0)

    # 4. Cut host c off. The lookupds stop hearing its PINGs and hide it after
    # --inactive-producer-timeout; what is published on c meanwhile is stored there.
    cut_at = time.monotonic()
    c.set_link(hc, up=False)
    for lh in lookupds:
        wait_for(f"lookupd {lh.ip} to hide cut-off nsqd c",
                 lambda lh=lh: hc.ip not in lookup_producers(d, lh), timeout=INACTIVE_TIMEOUT + 20)
    hidden_after = time.monotonic() - cut_at
    p4 = c.publish(hc, "p4-c-", 100)
    for ch in ("c1", "c2"):
        held = wait_for(f"nsqd c to hold p4 for {ch}", lambda ch=ch: held_messages(hc, ch) or None)
        assert held == len(p4), f"nsqd c holds {held} messages for {ch}, expected {len(p4)}"
    assert not set(p4) & set(c1.messages()), "delivered across a link that is down"
    c.set_link(hc, up=True)
    for lh in lookupds:
        wait_for(f"nsqd c re-registered with lookupd {lh.ip}",
                 lambda lh=lh: hc.ip in lookup_producers(d, lh))
    sent += p4
    wait_exactly_once(c1, sent)
    wait_exactly_once(c2, p3 + p4)

    # 5. Kill lookupd a: a new consumer (lookupd a listed first) discovers a and c through b.
    lookupd_a.kill(signal.SIGKILL)
    c3 = c.consumer("c3", lookupds)
    wait_for("c3 connected to a and c through lookupd b",
             lambda: channel_clients(a, "c3") == 1 and channel_clients(hc, "c3") == 1)
    p5 = c.publish(a, "p5-a-", 50) + c.publish(hc, "p5-c-", 50)
    sent += p5
    wait_exactly_once(c3, p5)
    wait_exactly_once(c1, sent)
    wait_exactly_once(c2, p3 + p4 + p5)
    assert set(c1.messages()) == set(sent), "c1 got messages nobody published"

    print(f"cluster test: {time.monotonic() - started:.1f}s; cut-off nsqd hidden by the "
          f"lookupds {hidden_after:.1f}s after the cut")
