#!/usr/bin/env python3
"""Checks a running Prometheus that scrapes the compose cluster (contrib/docker/check-cluster.sh
starts one): every target up, the alert rules loaded and healthy, replication and lookupd as
the cluster should be, and every query of the Grafana dashboard answered without an error.

Usage: check_prometheus_live.py http://HOST:9090 N_TARGETS N_NSQD
Standard library only; exits 1 on a failure.
"""

import json
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parent.parent / "grafana" / "nsq-rs.json"


def get(base, path, **params):
    url = base + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def query(base, q):
    return get(base, "/api/v1/query", query=q)


def scalar(base, q):
    r = query(base, q)["data"]["result"]
    return float(r[0]["value"][1]) if r else None


def main(base, n_targets, n_nsqd):
    fails = []

    def wait_for(what, q, want, timeout=60):
        deadline = time.time() + timeout
        got = None
        while time.time() < deadline:
            try:
                got = scalar(base, q)
            except OSError:
                got = None
            if got == want:
                print(f"prometheus-live: PASS: {what}: {q} = {got:g}")
                return
            time.sleep(1)
        fails.append(what)
        print(f"prometheus-live: FAIL: {what}: {q} = {got} (want {want:g})")

    wait_for("every target scraped and up", 'count(up{job=~"nsqd|nsqlookupd|nsqadmin"} == 1)', n_targets)
    wait_for("every nsqd linked to its 2 peers", "sum(nsq_nsqd_replication_peer_up)", n_nsqd * 2)
    wait_for("each nsqlookupd knows every nsqd", f"count(nsq_lookupd_producers == {n_nsqd})", 2)

    groups = get(base, "/api/v1/rules")["data"]["groups"]
    rules = [r for g in groups for r in g["rules"] if r["type"] == "alerting"]
    bad = [r["name"] for r in rules if r.get("health") != "ok"]
    if len(rules) >= 10 and not bad:
        print(f"prometheus-live: PASS: {len(rules)} alert rules loaded from alerts.yml, all healthy "
              f"(firing or pending now: {sorted({r['name'] for r in rules if r['state'] != 'inactive'}) or 'none'})")
    else:
        fails.append("rules")
        print(f"prometheus-live: FAIL: {len(rules)} alert rules, unhealthy: {bad}")

    d = json.loads(DASHBOARD.read_text())
    queries = []

    def walk(panels):
        for p in panels:
            queries.extend((p["title"], t["expr"]) for t in p.get("targets", []))
            walk(p.get("panels", []))

    walk(d["panels"])
    empty, errors = [], []
    for title, expr in queries:
        q = expr.replace("$__rate_interval", "1m")
        for v in ("instance", "topic", "channel"):
            q = q.replace(f"${v}", ".*")
        try:
            r = query(base, q)
        except Exception as e:  # noqa: BLE001 - an HTTP 400 is the answer to report
            errors.append(f"{title}: {e}")
            continue
        if r.get("status") != "success":
            errors.append(f"{title}: {r}")
        elif not r["data"]["result"]:
            empty.append(title)
    if errors:
        fails.append("dashboard")
        print(f"prometheus-live: FAIL: dashboard queries with errors: {errors}")
    else:
        print(f"prometheus-live: PASS: the dashboard's {len(queries)} queries answered by Prometheus; "
              f"{len(queries) - len(empty)} with data now; empty (nothing of that kind yet, or a rate "
              f"before two scrapes): {sorted(set(empty)) or 'none'}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3])))
