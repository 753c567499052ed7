"""Replication across nsqd hosts (issue 22, docs/replication.md), black-box, in network
namespaces: three nsqd (a, b, c) with `--replicas=2`, each listing the other two as
`--replication-peer`, two nsqlookupd (on a and b), and a client host d running producers
(gnsq's NsqdTCPClient via replication_client.py, which records every acknowledged body, and
our to_nsq) and consumers (gnsq's Consumer via cluster_client.py, and our nsq_tail on a
durable channel), discovering through both lookupds. Faults are nftables rules on the bridge
(replication_group.py). Each test builds its own group and removes it even on failure.

Phase 2a (built) — run always:
  a. steady load: every acknowledged message delivered exactly once to each channel; each
     origin's backlog is on its replica set's member (/stats) with exactly its unconsumed
     messages, and on no other nsqd (only the replica set stores), and drains to 0 once the
     consumers finished; no publish failure.
  b. a 10 % lossy replication path from one host: nothing lost, no publish failure with the
     default 10 s ack timeout (publishes are slower: latencies printed), no duplicate.
  c. a 3 s cut of one host (< the 10 s takeover timeout and the 5 s link timeout): nothing
     lost, no failure, no duplicate, `takeovers` 0 everywhere, links back.
  g. the same host's network flapping (1 s cut, 1 s up, five times): the same.
  h. an origin's outgoing traffic limited to 100 kbit/s (tc tbf) for 6 s: its publishes slow
     down, none fails, nothing lost or duplicated, no takeover.

Phase 2b (takeover and return):
  d. SIGKILL of one nsqd mid-stream, never restarted: every acknowledged message delivered at
     least once; duplicates only of the killed origin's messages, at most 2 x max_in_flight.
  e. a partition of one host longer than the takeover timeout, then heal: every acknowledged
     message delivered, one takeover, the returning origin moves to a new epoch.
  f. a killed host (--sync-every=1, so its messages survive on its disk) restarted on its data
     dir after its backlog was taken over: the taken-over messages are delivered exactly once
     (the restarted origin drops them) and the restarted origin ends up holding none of them.

Issue 28 (the paths outside those):
  i. a wiped-disk return within T: c killed, its data dir deleted, restarted at once with a
     new node ID: c's acknowledged messages are taken over and delivered once.
  j. an asymmetric cut: a<->b cut (each still reaches c, its own lookupd and the clients)
     for 20 s + 3 x T + 10 s, then a cut from the lookupd on b only: no takeover, nothing
     lost, duplicated or failed.
  k. c frozen with SIGSTOP for 3 x T, then resumed: nothing lost, duplicates only of c's
     messages within the bound, a new epoch if it was taken over.
  l. a stranger's HELLO and PUB (a host in no peer list): ERROR `not in group`, nothing
     acknowledged, stored, listed or delivered.
  m. a consumer FINs 500 of 2,000 and leaves with the rest in flight: the copies shrink by
     the 500; after the origin's SIGKILL the taker delivers the 1,500 and none of the 500.

Issue 29:
  n. a planned leave under load: c is drained (`PUT /config/drain`) while every host
     publishes and a consumer reads: c hands its messages to its replica set without waiting
     for the takeover timeout and exits by itself; every acknowledged message is delivered,
     duplicates only of c's messages and at most the consumer's max in flight, and no
     publish to a or b fails.
  o. a rolling restart under load: a, b and c in turn are drained, exit and start again on
     their data dir while every live host publishes and a consumer reads: every acknowledged
     message is delivered, no publish to a live member fails (their latency is printed: the
     bound while a member is down), duplicates at most the consumer's max in flight per leave,
     and every backlog, the departed epochs' included, drains to 0.

Root only (skipped otherwise); needs `ip`, `nft` and `curl` (.ci/run installs them) and the
binaries nsqd, nsqlookupd, to_nsq, nsq_tail (NSQD_BIN's directory).
"""

import os
import shutil
import signal
import time

import pytest

from conftest import nsqd_binary
from netns_cluster import TOPIC, channel_stats, nsqlookupd_binary, wait_exactly_once, wait_for, Pending
from replication_group import (
    NSQD_HOSTS,
    Group,
    duplicates,
    latency_summary,
    tail_bodies,
    tool_binary,
)

# cluster_client.py's gnsq Consumer.
MAX_IN_FLIGHT = 200
TAKEOVER_TIMEOUT = 10


@pytest.fixture
def group(request, tmp_path):
    """A started group; `@pytest.mark.parametrize("group", [[flags]], indirect=True)` adds nsqd
    flags."""
    if os.geteuid() != 0:
        pytest.skip("the network-namespace replication test needs root (CI runs it as root)")
    for tool in ("ip", "curl", "nft"):
        if shutil.which(tool) is None:
            pytest.skip(f"`{tool}` not found (.ci/run installs iproute2, curl and nftables)")
    if nsqd_binary() is None or nsqlookupd_binary() is None:
        pytest.fail("build the daemons first: cargo build -p nsqd-bin -p nsqlookupd-bin")
    for tool in ("to_nsq", "nsq_tail"):
        if tool_binary(tool) is None:
            pytest.fail(f"build {tool} next to nsqd first: cargo build -p {tool}-bin")
    g = Group(tmp_path)
    try:
        g.start(replicas=2, takeover_timeout=f"{TAKEOVER_TIMEOUT}s", extra=getattr(request, "param", ()))
        yield g
    except BaseException:
        print(g.logs())
        raise
    finally:
        g.cleanup()


def check(g, fn):
    try:
        fn(g)
    except BaseException:
        print(g.logs())
        raise


def wait_backlogs_drained(g, timeout=30):
    def drained():
        left = {o: g.backlog_messages(o) for o in NSQD_HOSTS if g.nsqd[o].proc.poll() is None}
        return True if all(v == 0 for d in left.values() for v in d.values()) else Pending(str(left))
    wait_for("every backlog to drain to 0 messages", drained, timeout=timeout)


def stop_producers(producers, may_fail):
    """Stops every producer: {host: acknowledged bodies}; only `may_fail`'s may have failed."""
    sent = {}
    for n, p in producers.items():
        p.stop()
        acked, failed, _ = p.results()
        sent[n] = acked
        if n != may_fail:
            assert failed == [], f"{n}: {len(failed)} failed: {p.fail_reasons()}"
    return sent


def wait_all_delivered(consumer, expected, timeout):
    """At-least-once: every body in `expected` came; returns the consumer's duplicates."""
    expected = set(expected)

    def missing():
        gone = expected - set(consumer.messages())
        return Pending(f"{len(gone)} missing, e.g. {sorted(gone)[:5]}") if gone else True
    wait_for(f"{consumer.name} to receive {len(expected)} messages", missing, timeout=timeout)
    return duplicates(consumer.messages())


# -- a. steady load --------------------------------------------------------------------------
def test_steady_load(group):
    check(group, steady_load)


def steady_load(g):
    started = time.monotonic()
    g.create_channels("g", "t")
    # 1. With no consumer yet: every origin's messages are on its replica set's member,
    #    counted exactly, and nothing of it on the other peer.
    pre = {"a": g.producer("a", "pa-", count=300, batch=30),
           "b": g.producer("b", "pb-", count=300, batch=1),
           "c": g.producer("c", "pc-", count=300, batch=30)}
    sent = []
    for n, p in pre.items():
        p.wait()
        acked, failed, _ = p.results()
        assert (len(acked), failed) == (300, []), f"{n}: {len(acked)} acked, failed {failed[:5]}"
        sent += acked
    sent += g.to_nsq("b", "tb-", 200)
    expect = {"a": 300, "b": 500, "c": 300}
    for o, count in expect.items():
        wait_for(f"{o}'s backlog of {count} messages on its replica set only",
                 lambda o=o, count=count: g.backlog_messages(o) == g.held_by_set(o, count)
                 or Pending(str(g.backlog_messages(o))))
    # 2. Consumers (gnsq on channel g, nsq_tail on channel t) while more is published.
    cg = g.consumer("g")
    tail = g.nsq_tail("t")
    live = [g.producer(n, f"l{n}-", count=1500, batch=10, rate=500) for n in NSQD_HOSTS]
    for p in live:
        p.wait()
        acked, failed, lat = p.results()
        assert (len(acked), failed) == (1500, []), f"{p.prefix}: {len(acked)} acked, {failed[:5]}"
        print(f"steady {p.prefix}: {latency_summary(lat)}")
        sent += acked
    wait_exactly_once(cg, sent, timeout=60)

    def tail_done():
        gone = set(sent) - set(tail_bodies(tail))
        return Pending(f"{len(gone)} missing") if gone else True
    wait_for("nsq_tail to receive everything", tail_done, timeout=60)
    assert not duplicates(tail_bodies(tail)), "nsq_tail got duplicates"
    assert set(tail_bodies(tail)) == set(sent) == set(cg.messages())
    # 3. Once both channels finished everything, every backlog is empty.
    wait_backlogs_drained(g)
    assert g.counter("publish_failures") == 0
    assert g.counter("takeovers") == 0
    print(f"steady load: {len(sent)} messages exactly once on 2 channels, "
          f"{time.monotonic() - started:.1f}s")


# -- b. a lossy replication path ---------------------------------------------------------------
def test_lossy_replication_path(group):
    check(group, lossy_path)


def lossy_path(g):
    g.create_channels("g")
    cg = g.consumer("g")
    g.lossy("a", 10)
    producers = [g.producer("a", "la-", count=2000, batch=10),
                 g.producer("a", "lA-", count=300, batch=1),
                 g.producer("b", "lb-", count=2000, batch=10)]
    sent = []
    for p in producers:
        p.wait(timeout=150)
        acked, failed, lat = p.results()
        print(f"lossy {p.prefix}: {latency_summary(lat)}; failed {len(failed)}")
        assert failed == [], f"{p.prefix}: {len(failed)} failed: {p.fail_reasons()}"
        sent += acked
    dropped = g.dropped()
    assert dropped > 0, "the lossy rule dropped nothing"
    dups = wait_all_delivered(cg, sent, timeout=60)
    g.heal()
    wait_backlogs_drained(g)
    assert g.counter("publish_failures") == 0
    print(f"lossy path: {len(sent)} acknowledged, all delivered, {len(dups)} duplicates, "
          f"{dropped} packets dropped")
    assert not dups, f"duplicates without any consumer fault: {sorted(dups.items())[:10]}"


# -- c. a cut shorter than the takeover timeout ------------------------------------------------
def acknowledged_without_failure(producers, label, slowed=(), slower_than_ms=0):
    """Waits for the producers; none may have failed a publish, and those on `slowed` hosts
    must have waited longer than `slower_than_ms` at least once. Returns what was acked."""
    sent = []
    for n, p in producers.items():
        p.wait(timeout=60)
        acked, failed, lat = p.results()
        print(f"{label}: {p.prefix}: {latency_summary(lat)}; failed {len(failed)}")
        assert failed == [], f"{p.prefix}: {len(failed)} failed: {p.fail_reasons()}"
        if n in slowed:
            assert max(lat) > slower_than_ms, f"{n}'s publishes did not slow down ({label})"
        sent += acked
    return sent


def no_takeover_and_drained(g, cg, sent, what):
    """Every acknowledged message delivered exactly once, links back, backlogs drained, no
    takeover and no publish failure counted."""
    wait_exactly_once(cg, sent, timeout=60)
    g.wait_linked()
    wait_backlogs_drained(g)
    assert g.counter("takeovers") == 0, f"{what} caused a takeover"
    assert g.counter("publish_failures") == 0


def test_short_cut(group):
    check(group, short_cut)


def short_cut(g):
    g.create_channels("g")
    cg = g.consumer("g")
    # Cut the member that acknowledges a's publishes (a's replica set), so that a's publishes
    # have to wait for it; publishes to the cut host itself wait for the link too.
    victim = g.replica_set("a")[0]
    producers = {n: g.producer(n, f"s{n}-", count=3000, batch=10, rate=300) for n in NSQD_HOSTS}
    time.sleep(3)
    g.cut(victim)
    time.sleep(3)
    dropped = g.dropped()
    g.heal()
    sent = acknowledged_without_failure(producers, f"cut of {victim}", slowed=("a", victim),
                                        slower_than_ms=2000)
    assert dropped > 0, "the cut dropped nothing"
    no_takeover_and_drained(g, cg, sent, "a 3 s cut")
    print(f"short cut: {len(sent)} acknowledged, all delivered once, {dropped} packets dropped")


def test_flapping_link(group):
    check(group, flapping_link)


def flapping_link(g):
    """A host's network flaps (1 s cut, 1 s up, five times): shorter than the 5 s dead-link
    rule and the takeover timeout, so publishes slow down but none fails, nothing is lost or
    duplicated, and no takeover happens."""
    g.create_channels("g")
    cg = g.consumer("g")
    victim = g.replica_set("a")[0]
    producers = {n: g.producer(n, f"f{n}-", count=3000, batch=10, rate=300) for n in NSQD_HOSTS}
    time.sleep(2)
    dropped = 0
    for _ in range(5):
        g.cut(victim)
        time.sleep(1)
        dropped += g.dropped()
        g.heal()
        time.sleep(1)
    sent = acknowledged_without_failure(producers, f"flapping {victim}")
    assert dropped > 0, "the flaps dropped nothing"
    no_takeover_and_drained(g, cg, sent, "a flapping link")
    print(f"flapping link: {len(sent)} acknowledged, all delivered once, {dropped} packets dropped")


def test_slow_origin(group):
    check(group, slow_origin)


def slow_origin(g):
    """An origin's outgoing traffic limited to 100 kbit/s for 6 s (its replication stream,
    ACKs and deliveries queue up): its publishes slow down but none fails, nothing is lost or
    duplicated, and no takeover happens."""
    g.create_channels("g")
    cg = g.consumer("g")
    producers = {n: g.producer(n, f"w{n}-", count=3000, batch=10, rate=300) for n in NSQD_HOSTS}
    time.sleep(2)
    g.slow("a", "100kbit")
    try:
        time.sleep(6)
    finally:
        g.unslow("a")
    sent = acknowledged_without_failure(producers, "slow a", slowed=("a",), slower_than_ms=100)
    no_takeover_and_drained(g, cg, sent, "a slow origin")
    print(f"slow origin: {len(sent)} acknowledged, all delivered once")


# -- d, e, f: takeover (phase 2b) -------------------------------------------------------------
def test_kill_without_restart(group):
    check(group, kill_without_restart)


def kill_without_restart(g):
    g.create_channels("g")
    cg = g.consumer("g")
    producers = {n: g.producer(n, f"k{n}-", count=0, batch=10, rate=300) for n in NSQD_HOSTS}
    time.sleep(4)
    g.kill("c", signal.SIGKILL)
    time.sleep(3)
    sent = stop_producers(producers, may_fail="c")
    wait_for("a takeover of c's backlog", lambda: g.counter("takeovers", "ab") >= 1,
             timeout=TAKEOVER_TIMEOUT + 30)
    dups = wait_all_delivered(cg, [m for v in sent.values() for m in v], timeout=TAKEOVER_TIMEOUT + 60)
    assert g.counter("takeovers", "ab") == 1
    assert not [m for m in dups if not m.startswith("kc-")], "duplicates of a live origin's messages"
    print(f"kill without restart: {sum(map(len, sent.values()))} acknowledged, all delivered, "
          f"{len(dups)} duplicates (bound {2 * MAX_IN_FLIGHT})")
    assert len(dups) <= 2 * MAX_IN_FLIGHT
    # One survivor holds c's epoch as taken over (its manifest, kept until c returns); the
    # other handed its copy to the taker and dropped it.
    wait_for("c's backlog taken over by one survivor, dropped by the other",
             lambda: g.backlog_states("c") == ["taken over"] or Pending(str(g.backlog_states("c"))))


def test_long_partition_then_heal(group):
    check(group, long_partition)


def long_partition(g):
    g.create_channels("g")
    cg = g.consumer("g")
    epoch_before = g.repl("c")["epoch"]
    producers = {n: g.producer(n, f"p{n}-", count=0, batch=10, rate=200) for n in NSQD_HOSTS}
    time.sleep(3)
    g.cut("c")
    wait_for("a takeover of the cut-off c", lambda: g.counter("takeovers", "ab") >= 1,
             timeout=TAKEOVER_TIMEOUT + 40)
    g.heal()
    time.sleep(3)
    sent = stop_producers(producers, may_fail="c")
    dups = wait_all_delivered(cg, [m for v in sent.values() for m in v], timeout=60)
    g.wait_linked()
    assert g.counter("takeovers", "ab") == 1
    assert g.repl("c")["epoch"] > epoch_before, "c did not move to a new epoch after the takeover"
    assert not [m for m in dups if not m.startswith("pc-")], "duplicates of a live origin's messages"
    print(f"long partition: {sum(map(len, sent.values()))} acknowledged, all delivered, "
          f"{len(dups)} duplicates (bound {2 * MAX_IN_FLIGHT})")
    assert len(dups) <= 2 * MAX_IN_FLIGHT


# --sync-every=1: c's diskqueue metadata is written after every write, so the messages survive
# the SIGKILL on c's disk (by default a kill loses the diskqueue's unsynced metadata, and the
# restarted c would hold nothing: the test could not fail).
@pytest.mark.parametrize("group", [["--sync-every=1"]], indirect=True)
def test_restart_after_takeover(group):
    check(group, restart_after_takeover)


def held(g, n, channel):
    c = channel_stats(g.h[n], channel)
    return c["depth"] + c["in_flight_count"] if c else 0


def restart_after_takeover(g):
    g.create_channels("g")
    p = g.producer("c", "rc-", count=500, batch=10)
    p.wait()
    sent, failed, _ = p.results()
    assert (len(sent), failed) == (500, [])
    assert held(g, "c", "g") == 500
    wait_for("c's 500 messages on its replica set",
             lambda: g.backlog_messages("c") == g.held_by_set("c", 500) or Pending(str(g.backlog_messages("c"))))
    g.kill("c", signal.SIGKILL)
    wait_for("a takeover of c's backlog", lambda: g.counter("takeovers", "ab") >= 1,
             timeout=TAKEOVER_TIMEOUT + 30)
    g.start_nsqd("c", name="nsqd-c-restarted")
    print(f"restarted c holds {held(g, 'c', 'g')} messages for channel g")
    cg = g.consumer("g")
    wait_exactly_once(cg, sent, timeout=60)
    # The restarted c must end up holding nothing for g: what it had was taken over (dropped
    # by the manifest); delivering it instead shows up as duplicates below.
    wait_for("c to hold nothing for channel g", lambda: held(g, "c", "g") == 0 or Pending(str(held(g, "c", "g"))))
    time.sleep(2)
    dups = duplicates(cg.messages())
    assert not dups, f"the restarted origin re-delivered {len(dups)} taken-over messages: {sorted(dups)[:10]}"
    assert g.counter("takeovers", "ab") == 1


# -- issue 28: the paths outside the ones above ------------------------------------------------
def test_wiped_disk_return(group):
    check(group, wiped_disk_return)


def wiped_disk_return(g):
    """c's disk is replaced: killed, its data dir deleted, back within ~1 s (well inside the
    takeover timeout) with a new node ID at the same address. Its acknowledged messages are on
    a and b only; the new identity must end the old one at once, and they are delivered."""
    g.create_channels("g")
    p = g.producer("c", "wc-", count=500, batch=10)
    p.wait()
    sent, failed, _ = p.results()
    assert (len(sent), failed) == (500, [])
    wait_for("c's 500 messages on its replica set",
             lambda: g.backlog_messages("c") == g.held_by_set("c", 500) or Pending(str(g.backlog_messages("c"))))
    old_id = g.node_ids["c"]
    g.kill("c", signal.SIGKILL)
    g.wipe("c")
    g.start_nsqd("c", name="nsqd-c-wiped")
    assert g.repl("c")["node_id"] != old_id, "a wiped data dir must give a new node ID"
    cg = g.consumer("g")
    dups = wait_all_delivered(cg, sent, timeout=TAKEOVER_TIMEOUT + 40)
    assert g.counter("takeovers", "ab") == 1
    assert not dups, f"{len(dups)} duplicates: nothing was in flight at the kill"
    print(f"wiped-disk return: {len(sent)} acknowledged, all delivered once")


def test_asymmetric_cut(group):
    check(group, asymmetric_cut)


def asymmetric_cut(g):
    """a and b cannot reach each other while each still reaches c, its own nsqlookupd and the
    clients, for as long as a lookupd entry takes to go stale (20 s) plus three takeover
    timeouts (the chooser's escalation included); then the reverse: a and b linked, a cut from
    the lookupd on b. Neither is dead: no takeover may happen, nothing is lost or duplicated,
    publishes slow down but never fail."""
    g.create_channels("g")
    cg = g.consumer("g")
    phase1, phase2 = 20 + 3 * TAKEOVER_TIMEOUT + 10, 20
    secs = phase1 + phase2 + 12
    producers = {n: g.producer(n, f"y{n}-", count=100 * secs, batch=10, rate=100) for n in NSQD_HOSTS}
    time.sleep(3)
    g.cut_between("a", "b")
    time.sleep(phase1)
    both = g.dropped()
    g.heal()
    time.sleep(3)
    g.cut_lookupd("a", "b")
    time.sleep(phase2)
    lookupd = g.dropped()
    g.heal()
    assert both > 0 and lookupd > 0, f"the cuts dropped nothing ({both}, {lookupd})"
    sent = acknowledged_without_failure(producers, "asymmetric cut")
    no_takeover_and_drained(g, cg, sent, "an a<->b cut")
    print(f"asymmetric cut: {len(sent)} acknowledged, all delivered once, no takeover")


def test_frozen_host(group):
    check(group, frozen_host)


def frozen_host(g):
    """c frozen (SIGSTOP) for 3 x T, then resumed: its sockets stay open but it answers
    nothing. Nothing acknowledged is lost; duplicates only of c's messages, within the bound;
    if c was taken over meanwhile it moves to a new epoch when it resumes."""
    g.create_channels("g")
    cg = g.consumer("g")
    epoch_before = g.repl("c")["epoch"]
    producers = {n: g.producer(n, f"z{n}-", count=0, batch=10, rate=200) for n in NSQD_HOSTS}
    time.sleep(3)
    t0 = time.monotonic()
    g.freeze("c")
    took = None
    while time.monotonic() - t0 < 3 * TAKEOVER_TIMEOUT:
        if took is None and g.counter("takeovers", "ab") >= 1:
            took = time.monotonic() - t0
        time.sleep(0.25)
    g.thaw("c")
    time.sleep(5)
    sent = stop_producers(producers, may_fail="c")
    dups = wait_all_delivered(cg, [m for v in sent.values() for m in v], timeout=60)
    g.wait_linked()
    assert not [m for m in dups if not m.startswith("zc-")], "duplicates of a live origin's messages"
    assert len(dups) <= 2 * MAX_IN_FLIGHT, f"{len(dups)} duplicates"
    if g.counter("takeovers", "ab"):
        assert g.repl("c")["epoch"] > epoch_before, "c did not move to a new epoch after the takeover"
    print(f"frozen host: {sum(map(len, sent.values()))} acknowledged, all delivered, "
          f"{len(dups)} duplicates; taken over after {took if took is None else round(took, 1)} s")


def test_stranger_is_not_a_member(group):
    check(group, stranger_is_not_a_member)


def stranger_is_not_a_member(g):
    """A host that is in no nsqd's --replication-peer list opens a replication link to a and
    sends HELLO and a PUB: it gets ERROR `not in group`, nothing is acknowledged, stored or
    delivered, and nothing of it appears in /stats or under a's replica/ directory."""
    g.create_channels("g")
    cg = g.consumer("g")
    for node_id in (0, 0x5EED5EED5EED):
        lines = g.client("stranger", f"--nsqd={g.h['a'].ip}:4150", f"--topic={TOPIC}",
                         f"--node-id={node_id}")
        frames = [line.split() for line in lines if line.startswith("FRAME ")]
        assert frames, lines
        kind, payload = frames[0][1], bytes.fromhex(frames[0][2] if len(frames[0]) > 2 else "")
        assert kind == "42", f"not an ERROR first: {lines}"
        code, n = int.from_bytes(payload[:2], "big"), int.from_bytes(payload[2:4], "big")
        assert (code, payload[4:4 + n].decode()) == (4, "not in group"), lines
        assert [f for f in frames if f[1] in ("81", "82", "83")] == [], f"accepted: {lines}"
    time.sleep(TAKEOVER_TIMEOUT + 5)  # a takeover of the stranger's "backlog" would be done
    for n in NSQD_HOSTS:
        origins = {b["origin"] for b in g.repl(n)["backlogs"]}
        assert origins <= {g.node_ids[m] for m in NSQD_HOSTS}, f"{n} holds a stranger's backlog: {origins}"
    replica = g.data_dir("a") / "replica"
    names = sorted(p.name for p in replica.iterdir()) if replica.exists() else []
    assert not [x for x in names if x.startswith(f"{0x5EED5EED5EED:016x}") or x.startswith("0000000000000000")], names
    assert not [m for m in cg.messages() if m.startswith("stranger-")], "a stranger's message was delivered"
    assert g.counter("takeovers") == 0


# In memory (the default queue size; the group's hosts otherwise run with --mem-queue-size=0).
@pytest.mark.parametrize("group", [["--mem-queue-size=10000"]], indirect=True)
def test_consumer_leaves_with_messages_in_flight(group):
    check(group, consumer_leaves)


def consumer_leaves(g):
    """A consumer FINs 500 of a's 2,000 messages and leaves with the rest in flight (requeued):
    a's copy must shrink by exactly the 500, and after a's SIGKILL the taker
    delivers the other 1,500 and none of the 500."""
    g.create_channels("g")
    p = g.producer("a", "fa-", count=2000, batch=100)
    p.wait()
    sent, failed, _ = p.results()
    assert (len(sent), failed) == (2000, [])
    wait_for("a's 2000 messages on its replica set",
             lambda: g.backlog_messages("a") == g.held_by_set("a", 2000) or Pending(str(g.backlog_messages("a"))))
    lines = g.client("finish_some", f"--nsqd={g.h['a'].ip}:4150", f"--topic={TOPIC}", "--channel=g",
                     "--rdy=2500", "--fin=500")
    finished = {line.split()[1] for line in lines if line.startswith("FINISHED ")}
    assert len(finished) == 500, lines[-3:]
    wait_for("a's copies trimmed by the 500 FINs",
             lambda: g.backlog_messages("a") == g.held_by_set("a", 1500) or Pending(str(g.backlog_messages("a"))),
             timeout=15)
    time.sleep(5)
    g.kill("a", signal.SIGKILL)
    cg = g.consumer("g")
    wait_all_delivered(cg, set(sent) - finished, timeout=TAKEOVER_TIMEOUT + 40)
    time.sleep(2)
    again = finished & set(cg.messages())
    assert not again, f"{len(again)} FINed messages delivered again, e.g. {sorted(again)[:5]}"
    print("consumer leaves: 1500 delivered by the taker, none of the 500 FINed")


# -- n. a planned leave -------------------------------------------------------------------------
def test_planned_leave_under_load(group):
    check(group, planned_leave)


def planned_leave(g):
    g.create_channels("g")
    cg = g.consumer("g")
    producers = {n: g.producer(n, f"v{n}-", count=0, batch=10, rate=300) for n in NSQD_HOSTS}
    time.sleep(4)
    # c's producer stops first: a draining nsqd refuses publishes (its clients publish elsewhere).
    producers["c"].stop()
    began = time.monotonic()
    g.h["c"].curl(f"http://{g.h['c'].ip}:4151/config/drain", "-X", "PUT")
    wait_for("c to hand its messages over and exit", lambda: g.nsqd["c"].proc.poll() is not None,
             timeout=TAKEOVER_TIMEOUT)
    took = time.monotonic() - began
    assert g.nsqd["c"].proc.returncode == 0, g.nsqd["c"].proc.returncode
    time.sleep(2)
    sent = [m for v in stop_producers(producers, may_fail="c").values() for m in v]
    dups = wait_all_delivered(cg, sent, timeout=60)
    assert g.counter("takeovers", "ab") >= 1
    assert not [m for m in dups if not m.startswith("vc-")], "duplicates of a live origin's messages"
    print(f"planned leave: c exited {took:.1f}s after the drain began (T = {TAKEOVER_TIMEOUT}s), "
          f"{len(sent)} acknowledged, all delivered, {len(dups)} duplicates (bound {MAX_IN_FLIGHT})")
    assert len(dups) <= MAX_IN_FLIGHT


# -- o. a rolling restart ------------------------------------------------------------------------
def test_rolling_restart_under_load(group):
    check(group, rolling_restart)


def rolling_restart(g):
    """Every member restarted in turn (drain, exit, start on its data dir) while every live
    host publishes and a consumer reads: nothing lost, no publish to a live member fails, and
    each leave duplicates at most the consumer's max in flight."""
    g.create_channels("g")
    cg = g.consumer("g")
    producers = {n: g.producer(n, f"w{n}0-", count=0, batch=10, rate=300) for n in NSQD_HOSTS}
    sent, lat, took = [], [], []

    def retire(p):
        p.stop()
        acked, failed, latencies = p.results()
        assert failed == [], f"{p.prefix}: {len(failed)} failed: {p.fail_reasons()}"
        sent.extend(acked)
        lat.extend(latencies)

    time.sleep(4)
    for turn, n in enumerate(NSQD_HOSTS, start=1):
        # The member's own clients publish elsewhere while it drains (it refuses publishes).
        retire(producers.pop(n))
        began = time.monotonic()
        g.h[n].curl(f"http://{g.h[n].ip}:4151/config/drain", "-X", "PUT")
        wait_for(f"{n} to hand its messages over and exit", lambda: g.nsqd[n].proc.poll() is not None,
                 timeout=TAKEOVER_TIMEOUT)
        took.append(time.monotonic() - began)
        assert g.nsqd[n].proc.returncode == 0, g.nsqd[n].proc.returncode
        time.sleep(2)  # the others publish with one member down
        g.start_nsqd(n, name=f"nsqd-{n}-turn{turn}")
        g.wait_linked()
        producers[n] = g.producer(n, f"w{n}{turn}-", count=0, batch=10, rate=300)
        time.sleep(4)
    for p in producers.values():
        retire(p)
    dups = wait_all_delivered(cg, sent, timeout=60)
    # Nothing is stranded: every backlog (the old epochs' included) drains once consumed.
    wait_backlogs_drained(g)
    print(f"rolling restart: exits {', '.join(f'{t:.1f}s' for t in took)} after the drain began "
          f"(T = {TAKEOVER_TIMEOUT}s), {len(sent)} acknowledged, 0 failed, all delivered, "
          f"{len(dups)} duplicates (bound {len(NSQD_HOSTS)} x {MAX_IN_FLIGHT}); publish {latency_summary(lat)}")
    assert len(dups) <= len(NSQD_HOSTS) * MAX_IN_FLIGHT
