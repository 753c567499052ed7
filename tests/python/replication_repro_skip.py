"""Reproduction (not collected by pytest; root): a restarted origin that applied a takeover
manifest drops the taken-over messages from its diskqueue at about one per 30 s, and the
messages published to it after its return wait behind them (main 02827d2, debug build):

    NSQD_BIN=... NSQLOOKUPD_BIN=... python tests/python/replication_repro_skip.py

prints c's channel g (depth, in flight, [(RDY, delivered)]) every 5 s after a consumer connects;
depth should fall to 0 within seconds and the 10 new messages be delivered.
"""
import sys, time, signal, json
from pathlib import Path
import tempfile
sys.path.insert(0, str(Path(__file__).resolve().parent))
from replication_group import Group
from netns_cluster import wait_for, channel_stats
tmp = Path(tempfile.mkdtemp(prefix="repro-skip-"))
g = Group(tmp, tag="y")
try:
    g.start(replicas=2, takeover_timeout="10s", extra=["--sync-every=1"])
    g.create_channels("g")
    p = g.producer("c", "rc-", count=500, batch=10); p.wait()
    g.kill("c", signal.SIGKILL)
    wait_for("takeover", lambda: g.counter("takeovers", "ab") >= 1, timeout=60)
    g.start_nsqd("c", name="nsqd-c-restarted")
    def st():
        c = channel_stats(g.h["c"], "g")
        return (c["depth"], c["in_flight_count"], [(x["ready_count"], x["message_count"]) for x in c["clients"] or []])
    print("after restart, no consumer:", st(), flush=True)
    time.sleep(6)
    print("after 6 s, no consumer:", st(), flush=True)
    cg = g.consumer("g")
    time.sleep(5)
    p2 = g.producer("c", "new-", count=10, batch=10); p2.wait()
    print("published 10 new messages to the restarted c:", len(p2.results()[0]), "acked", flush=True)
    for i in range(4):
        time.sleep(5)
        print(f"consumer +{5*(i+1)}s: c channel g {st()}; consumer got {len(cg.messages())} ({len(set(cg.messages()))} distinct), new ones {sum(m.startswith('new-') for m in cg.messages())}", flush=True)
finally:
    print(tmp)
    g.cleanup()
