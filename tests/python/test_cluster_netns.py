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

import os
import shutil
import signal
import time

import pytest

from conftest import nsqd_binary
from netns_cluster import (
    INACTIVE_TIMEOUT,
    TOPIC,
    Cluster,
    channel_clients,
    held_messages,
    lookup_producers,
    nsqlookupd_binary,
    wait_exactly_once,
    wait_for,
)


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
