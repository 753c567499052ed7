"""A replication group across network namespaces, for test_replication_netns.py and
replication_chaos.py (docs/replication.md): three nsqd hosts a, b, c, each started with
`--replicas=N` and the other two as `--replication-peer`, two nsqlookupd (on a and b), and a
client host d. Faults are nftables rules in the switch namespace's bridge (family `bridge`,
hook `forward`), so the hosts' own stacks are untouched and a fault is plain packet loss:

    lossy(h, pct)   drop pct % of h's packets to the other nsqd's TCP port 4150 (its links as
                    an origin: PUB/FIN frames to its replicas)
    cut(h)          drop everything to and from h
    cut_between(x, y, one_way=False)
                    drop what x sends to y (and, unless one_way, what y sends to x); both
                    still reach every other host
    cut_lookupd(x, y)
                    drop only the nsqlookupd traffic between x and the lookupd on y
    heal()          remove every rule

Every rule has a counter, so a test can check that its fault did drop packets.
"""

import collections
import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from conftest import nsqd_binary
from netns_cluster import CLIENT, TOPIC, Cluster, Proc, run, wait_for

HERE = Path(__file__).resolve().parent
PRODUCER = HERE / "replication_client.py"
NSQD_HOSTS = "abc"
LOOKUPD_HOSTS = "ab"
CLIENT_HOST = "d"


def tool_binary(name):
    """A utility built next to the nsqd binary (to_nsq, nsq_tail), or None."""
    b = nsqd_binary()
    if b is None:
        return None
    p = Path(b).parent / name
    return p if p.exists() else None


class TrimProc(Proc):
    """A Proc whose stdout lines are kept up to the first "." (a padded body's name only: see
    replication_client.py --pad), so that long bodies do not fill the test's memory."""

    def _read(self):
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n").split(".", 1)[0]
            with self.lock:
                self.lines.append(line)


class Producer:
    """A replication_client.py publisher on the client host (ACK/FAIL per command)."""

    def __init__(self, group, nsqd_host, prefix, count=0, batch=10, rate=0, name=None, pad=0):
        self.prefix = prefix
        self.proc = group.cluster.start(group.cluster.hosts[CLIENT_HOST], name or f"producer-{prefix}", [
            sys.executable, PRODUCER, "produce", f"--nsqd={nsqd_host.ip}:4150", f"--topic={TOPIC}",
            f"--prefix={prefix}", f"--count={count}", f"--batch={batch}", f"--rate={rate}",
            f"--pad={pad}",
        ], capture=True)

    def _lines(self):
        with self.proc.lock:
            return list(self.proc.lines)

    def results(self):
        """(acked bodies, failed bodies, ack latencies in ms) so far."""
        acked, failed, lat = [], [], []
        for line in self._lines():
            parts = line.split(" ", 3)
            if parts[0] in ("ACK", "FAIL"):
                first, n = int(parts[1]), int(parts[2])
                bodies = [f"{self.prefix}{k}" for k in range(first, first + n)]
                if parts[0] == "ACK":
                    acked += bodies
                    lat.append(float(parts[3]))
                else:
                    failed += bodies
        return acked, failed, lat

    def next_index(self):
        """The index of the next body this producer publishes (after every ACK and FAIL)."""
        last = 0
        for line in self._lines():
            parts = line.split(" ", 3)
            if parts[0] in ("ACK", "FAIL"):
                last = max(last, int(parts[1]) + int(parts[2]))
        return last

    def fail_reasons(self):
        return collections.Counter(
            line.split(" ", 3)[3][:80] for line in self._lines() if line.startswith("FAIL "))

    def done(self):
        return any(line.startswith("DONE ") for line in self._lines())

    def stop(self, timeout=60):
        """SIGTERM (finishes the command in flight) and wait for DONE."""
        if self.proc.proc.poll() is None:
            self.proc.proc.terminate()
        self.proc.proc.wait(timeout=timeout)

    def wait(self, timeout=120):
        self.proc.proc.wait(timeout=timeout)
        assert self.done(), f"{self.proc.name} ended without DONE:\n{self.proc.tail()}"


def latency_summary(lat):
    if not lat:
        return "no acks"
    s = sorted(lat)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    return f"{len(s)} acks p50 {pick(0.5):.1f} ms p99 {pick(0.99):.1f} ms max {s[-1]:.1f} ms"


class Group:
    def __init__(self, tmp_path, tag="r"):
        self.cluster = Cluster(tmp_path, names=NSQD_HOSTS + CLIENT_HOST, tag=tag)
        self.h = self.cluster.hosts
        self.nsqd = {}
        self.flags = {}
        self.node_ids = {}
        self.faults = False

    # -- start and stop ----------------------------------------------------------------
    def start(self, replicas=2, takeover_timeout="10s", extra=()):
        c = self.cluster
        c.build_network()
        self.lookupds = [self.h[n] for n in LOOKUPD_HOSTS]
        for lh in self.lookupds:
            c.start_lookupd(lh)
        for i, n in enumerate(NSQD_HOSTS):
            self.flags[n] = [
                f"--replicas={replicas}",
                *(f"--replication-peer={self.h[p].ip}:4150" for p in NSQD_HOSTS if p != n),
                f"--replication-takeover-timeout={takeover_timeout}",
                *extra,
            ]
            self.start_nsqd(n)
        for n in NSQD_HOSTS:
            self.node_ids[n] = self.repl(n)["node_id"]
        self.wait_linked()

    def start_nsqd(self, n, name=None):
        idx = NSQD_HOSTS.index(n) + 1
        self.nsqd[n] = self.cluster.start_nsqd(self.h[n], idx, self.lookupds, self.flags[n], name=name)
        # /ping answers at once; the backlogs it holds are listed once their replay ends.
        wait_for(f"{n}'s replica backlogs replayed",
                 lambda: self.repl(n)["replay"] == "done" or None, timeout=120)
        return self.nsqd[n]

    def kill(self, n, sig=9):
        self.nsqd[n].kill(sig)

    def data_dir(self, n):
        return self.cluster.tmp / f"data-{self.h[n].name}"

    def wipe(self, n):
        """Deletes nsqd n's data directory (a disk replaced or lost); n must be stopped."""
        assert self.nsqd[n].proc.poll() is not None, f"{n} still runs"
        shutil.rmtree(self.data_dir(n))

    def freeze(self, n):
        """SIGSTOP: the process holds its sockets and answers nothing (`thaw` resumes it)."""
        self.nsqd[n].proc.send_signal(signal.SIGSTOP)

    def thaw(self, n):
        self.nsqd[n].proc.send_signal(signal.SIGCONT)

    def client(self, *args):
        """replication_client.py with `args` on the client host, to completion: its lines."""
        out = run(*self.h[CLIENT_HOST].exec_args(sys.executable, PRODUCER, *args))
        return out.splitlines()

    def cleanup(self):
        self.cluster.cleanup()

    # -- /stats --------------------------------------------------------------------------
    def stats(self, n):
        return json.loads(self.h[n].curl(f"http://{self.h[n].ip}:4151/stats?format=json"))

    def repl(self, n):
        return self.stats(n)["replication"]

    def wait_linked(self, among=NSQD_HOSTS, timeout=30):
        """Every nsqd in `among` has a connected link to each other one, and N-1 set members."""
        def ok():
            for n in among:
                r = self.repl(n)
                by_addr = {p["address"]: p for p in r["peers"]}
                for m in among:
                    if m == n:
                        continue
                    p = by_addr.get(f"{self.h[m].ip}:4150")
                    if p is None or p["state"] != "connected":
                        return None
                if sum(p["in_replica_set"] for p in r["peers"]) != r["replicas"] - 1:
                    return None
            return True
        wait_for(f"replication links among {among}", ok, timeout=timeout)

    def replica_set(self, n):
        """The hosts in n's replica set (its peers with in_replica_set)."""
        by_ip = {self.h[m].ip: m for m in NSQD_HOSTS}
        return [by_ip[p["address"].rsplit(":", 1)[0]] for p in self.repl(n)["peers"] if p["in_replica_set"]]

    def backlog_messages(self, origin):
        """{holder: messages} of `origin`'s backlogs (all epochs) on each other live nsqd."""
        out = {}
        oid = self.node_ids[origin]
        for n in NSQD_HOSTS:
            if n == origin or self.nsqd[n].proc.poll() is not None:
                continue
            out[n] = sum(b["messages"] for b in self.repl(n)["backlogs"] if b["origin"] == oid)
        return out

    def held_by_set(self, origin, count):
        """`origin`'s backlog as only its replica set stores it: `count` messages on each member
        of its set, none on the other live nsqd (as `backlog_messages` gives it)."""
        in_set = set(self.replica_set(origin))
        return {m: (count if m in in_set else 0) for m in self.backlog_messages(origin)}

    def backlog_states(self, origin):
        """The states of `origin`'s backlogs (all epochs) on the other live nsqd, sorted."""
        oid = self.node_ids[origin]
        return sorted(b["state"] for n in NSQD_HOSTS
                      if n != origin and self.nsqd[n].proc.poll() is None
                      for b in self.repl(n)["backlogs"] if b["origin"] == oid)

    def counter(self, key, among=NSQD_HOSTS):
        """Sum of the replication `key` (publish_failures, takeovers, ...) over live nsqd."""
        return sum(self.repl(n)[key] for n in among if self.nsqd[n].proc.poll() is None)

    def create_channels(self, *channels, nodes=NSQD_HOSTS):
        """The topic and `channels` on each of `nodes`. The topic is paused meanwhile, so
        that messages a producer published before the channels existed (a node back with an
        empty data dir) go to every channel, not only to the first one created."""
        for n in nodes:
            url = f"http://{self.h[n].ip}:4151"
            self.h[n].curl(f"{url}/topic/create?topic={TOPIC}", "-X", "POST")
            self.h[n].curl(f"{url}/topic/pause?topic={TOPIC}", "-X", "POST")
            for ch in channels:
                self.h[n].curl(f"{url}/channel/create?topic={TOPIC}&channel={ch}", "-X", "POST")
            self.h[n].curl(f"{url}/topic/unpause?topic={TOPIC}", "-X", "POST")

    # -- clients -------------------------------------------------------------------------
    def producer(self, n, prefix, **kw):
        return Producer(self, self.h[n], prefix, **kw)

    def _start_trimmed(self, name, cmd):
        p = TrimProc(self.h[CLIENT_HOST], name, cmd, self.cluster.tmp, capture=True)
        self.cluster.procs.append(p)
        return p

    def consumer(self, channel):
        """A gnsq consumer (cluster_client.py, as Cluster.consumer) on the client host:
        `MSG <body>` lines."""
        return self._start_trimmed(f"consumer-{channel}", [
            sys.executable, CLIENT, "consume", f"--topic={TOPIC}", f"--channel={channel}",
            *(f"--lookupd=http://{h.ip}:4161" for h in self.lookupds),
        ])

    def nsq_tail(self, channel):
        """Our nsq_tail on a durable channel (the default one is #ephemeral, not replicated)."""
        tail = tool_binary("nsq_tail")
        assert tail is not None, "nsq_tail must be built next to the nsqd binary"
        return self._start_trimmed(f"nsq_tail-{channel}", [
            tail, f"--topic={TOPIC}", f"--channel={channel}",
            *(f"--lookupd-http-address={lh.ip}:4161" for lh in self.lookupds),
        ])

    def to_nsq(self, n, prefix, count):
        """Our to_nsq publishing `count` lines to nsqd n (PUB each, fatal on error); returns the
        bodies once it exited 0."""
        bodies = [f"{prefix}{i}" for i in range(count)]
        path = self.cluster.tmp / f"to_nsq-{prefix}.txt"
        path.write_text("".join(b + "\n" for b in bodies))
        p = self.cluster.start(self.h[CLIENT_HOST], f"to_nsq-{prefix}", [
            "sh", "-c", f'exec "$0" --topic={TOPIC} --nsqd-tcp-address={self.h[n].ip}:4150 < "$1"',
            tool_binary("to_nsq"), path,
        ])
        rc = p.proc.wait(timeout=120)
        assert rc == 0, f"to_nsq exited {rc}:\n{p.tail()}"
        return bodies

    # -- faults (nftables in the switch's bridge) ------------------------------------------
    def _nft(self, script):
        path = self.cluster.tmp / "nft.rules"
        path.write_text(script)
        run("ip", "netns", "exec", self.cluster.sw, "nft", "-f", path)

    def _ensure_table(self):
        if not self.faults:
            self._nft("table bridge nsqfault {\n chain faults {\n"
                      "  type filter hook forward priority 0; policy accept;\n }\n}\n")
            self.faults = True

    def lossy(self, n, pct):
        self._ensure_table()
        others = ", ".join(self.h[m].ip for m in NSQD_HOSTS if m != n)
        self._nft(f'add rule bridge nsqfault faults iifname "{self.h[n].port}" ip daddr {{ {others} }} '
                  f"tcp dport 4150 numgen random mod 100 < {pct} counter drop comment \"lossy-{n}\"\n")

    def cut(self, n):
        self._ensure_table()
        port = self.h[n].port
        self._nft(f'add rule bridge nsqfault faults iifname "{port}" counter drop comment "cut-{n}"\n'
                  f'add rule bridge nsqfault faults oifname "{port}" counter drop comment "cut-{n}"\n')

    def cut_between(self, x, y, one_way=False):
        self._ensure_table()
        px, py = self.h[x].port, self.h[y].port
        rules = f'add rule bridge nsqfault faults iifname "{px}" oifname "{py}" counter drop comment "cut-{x}-{y}"\n'
        if not one_way:
            rules += f'add rule bridge nsqfault faults iifname "{py}" oifname "{px}" counter drop comment "cut-{y}-{x}"\n'
        self._nft(rules)

    def cut_lookupd(self, x, y):
        """Drop the nsqlookupd traffic (ports 4160, 4161) between host x and the lookupd on
        host y, both ways; everything else between them passes."""
        self._ensure_table()
        px, py = self.h[x].port, self.h[y].port
        self._nft(
            f'add rule bridge nsqfault faults iifname "{px}" oifname "{py}" tcp dport {{ 4160, 4161 }} counter drop comment "cut-lookupd-{x}-{y}"\n'
            f'add rule bridge nsqfault faults iifname "{py}" oifname "{px}" tcp sport {{ 4160, 4161 }} counter drop comment "cut-lookupd-{y}-{x}"\n')

    def slow(self, n, rate):
        """Limits host n's outgoing traffic to `rate` (tc tbf on its eth0; `unslow` undoes)."""
        run(*self.h[n].exec_args("tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", rate,
                                 "burst", "16kbit", "latency", "500ms"))

    def unslow(self, n):
        run(*self.h[n].exec_args("tc", "qdisc", "del", "dev", "eth0", "root"), check=False)

    def heal(self):
        if self.faults:
            self._nft("flush chain bridge nsqfault faults\n")

    def dropped(self):
        """Packets dropped by the current rules (their counters)."""
        if not self.faults:
            return 0
        out = run("ip", "netns", "exec", self.cluster.sw, "nft", "list", "chain", "bridge",
                  "nsqfault", "faults")
        return sum(int(x) for x in re.findall(r"counter packets (\d+)", out))

    def logs(self):
        return self.cluster.logs()


def tail_bodies(proc):
    """The bodies nsq_tail printed (one per line)."""
    with proc.lock:
        return list(proc.lines)


def duplicates(bodies):
    return {m: k for m, k in collections.Counter(bodies).items() if k > 1}


def disk_usage(path):
    """Bytes under `path` (du -sb), 0 if it does not exist."""
    p = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True)
    return int(p.stdout.split()[0]) if p.returncode == 0 and p.stdout else 0
