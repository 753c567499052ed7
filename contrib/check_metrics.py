#!/usr/bin/env python3
"""Checks that the dashboard and the alert rules use only metrics our daemons export.

    python3 contrib/check_metrics.py [--scrape FILE.prom ...] [--promtool]

1. Reads the exported families from docs/metrics.md (the first, back-quoted column of its
   tables) and the metric names used by contrib/grafana/nsq-rs.json (every target's expr,
   every variable's query), contrib/prometheus/alerts.yml (every expr) and
   contrib/prometheus/alerts_test.yml (every input series): a name that is neither in
   docs/metrics.md nor Prometheus' own `up` fails.
2. --scrape: files of what nsqd, nsqlookupd and nsqadmin served at /metrics (see
   contrib/prometheus/scrape-live.sh): the families they declare (# TYPE) must be exactly
   docs/metrics.md's list, and each name the dashboard and rules use must be among them.
3. --promtool: every dashboard query, with Grafana's variables replaced ($__rate_interval by
   5m, $instance and the like by .*), must parse as PromQL (promtool check rules on a
   generated rule file).

Prints a PASS or FAIL line per check and exits 1 on any FAIL. Python's standard library only.
"""

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "metrics.md"
DASHBOARD = ROOT / "contrib" / "grafana" / "nsq-rs.json"
ALERTS = ROOT / "contrib" / "prometheus" / "alerts.yml"
ALERTS_TEST = ROOT / "contrib" / "prometheus" / "alerts_test.yml"
# Series Prometheus makes itself for every target.
PROMETHEUS_OWN = {"up"}
KEYWORDS = {
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
    "group_left", "group_right", "inf", "nan", "Inf", "NaN", "atan2",
}

failures = 0


def report(ok, what):
    global failures
    print(f"check-metrics: {'PASS' if ok else 'FAIL'}: {what}")
    if not ok:
        failures += 1


def documented_families():
    names = set()
    for line in DOCS.read_text().splitlines():
        m = re.match(r"\|\s*`([a-zA-Z_:][a-zA-Z0-9_:]*)`\s*\|", line)
        if m:
            names.add(m.group(1))
    return names


def promql_names(expr):
    """The metric names an expression selects (roughly: PromQL's grammar is not parsed, but
    what the dashboard and rules write is)."""
    lv = re.fullmatch(r"\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)[^,]*,.*\)\s*", expr)
    if lv:
        return {lv.group(1)}
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"'(?:[^'\\]|\\.)*'", "''", e)
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # ranges, subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        name, before = m.group(0), e[: m.start()]
        if before.endswith("$") or re.search(r"[0-9.]$", before):
            continue  # a Grafana variable; a number's exponent or a duration's unit
        if e[m.end():].lstrip().startswith("("):
            continue  # a function
        if name in KEYWORDS:
            continue
        names.add(name)
    return names


def dashboard_queries():
    d = json.loads(DASHBOARD.read_text())
    queries = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                queries.append((f"panel '{p.get('title')}'", t["expr"]))
            walk(p.get("panels", []))

    walk(d["panels"])
    for v in d.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            queries.append((f"variable ${v['name']}", q))
    return queries


def rule_exprs():
    out = []
    for line in ALERTS.read_text().splitlines():
        m = re.match(r"\s*expr:\s*(.+?)\s*$", line)
        if m:
            out.append(("alerts.yml", m.group(1).strip("'\"")))
    for line in ALERTS_TEST.read_text().splitlines():
        m = re.match(r"\s*-\s*series:\s*'([^']*)'", line)
        if m:
            out.append(("alerts_test.yml series", m.group(1)))
    return out


def scraped_families(files):
    fams = set()
    for f in files:
        for line in Path(f).read_text().splitlines():
            m = re.match(r"# TYPE (\S+) ", line)
            if m:
                fams.add(m.group(1))
    return fams


def promtool_parse(queries):
    if not shutil.which("promtool"):
        report(False, "--promtool: promtool is not installed (Debian package prometheus)")
        return
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, (_, q) in enumerate(queries):
        lv = re.fullmatch(r"\s*label_values\((.*),\s*[a-zA-Z_]+\s*\)\s*", q)
        if lv:
            q = lv.group(1)  # Grafana's label_values(selector, label): check the selector
        q = q.replace("$__rate_interval", "5m").replace("$__interval", "1m")
        q = re.sub(r"\$\{?[a-zA-Z_]+\}?", ".*", q)
        lines += [f"      - record: dashboard:query_{i}", f"        expr: {json.dumps(q)}"]
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    r = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True)
    Path(f.name).unlink()
    report(r.returncode == 0,
           f"the dashboard's {len(queries)} queries parse as PromQL (promtool check rules)"
           + ("" if r.returncode == 0 else ": " + (r.stdout + r.stderr).strip()))


def main(argv):
    scrape = []
    use_promtool = False
    in_scrape = False
    for a in argv:
        if a == "--scrape":
            in_scrape = True
        elif a == "--promtool":
            use_promtool, in_scrape = True, False
        elif in_scrape and not a.startswith("-"):
            scrape.append(a)
        else:
            print(__doc__, file=sys.stderr)
            return 2

    documented = documented_families()
    report(len(documented) >= 40, f"docs/metrics.md lists {len(documented)} families")
    allowed = documented | PROMETHEUS_OWN

    used = {}
    dq = dashboard_queries()
    for where, expr in dq + rule_exprs():
        for n in promql_names(expr):
            used.setdefault(n, set()).add(where.split(" '")[0])
    dash_names = {n for _, q in dq for n in promql_names(q)}
    rule_names = {n for w, q in rule_exprs() for n in promql_names(q)}
    unknown = sorted(n for n in used if n not in allowed)
    report(not unknown and bool(dash_names) and bool(rule_names),
           f"the dashboard ({len(dq)} queries, {len(dash_names)} names) and the rules "
           f"({len(rule_names)} names) use only documented names"
           + (f"; not in docs/metrics.md: {', '.join(f'{n} ({sorted(used[n])})' for n in unknown)}"
              if unknown else ""))
    unused = sorted(documented - set(used))
    print(f"check-metrics: documented but used by neither: {', '.join(unused) or 'none'}")

    if scrape:
        live = scraped_families(scrape)
        missing = sorted(documented - live)
        extra = sorted(live - documented)
        report(not missing and not extra,
               f"a live scrape ({len(scrape)} files, {len(live)} families) declares exactly "
               f"docs/metrics.md's families"
               + (f"; documented, not served: {missing}" if missing else "")
               + (f"; served, not documented: {extra}" if extra else ""))
        absent = sorted(n for n in used if n not in live and n not in PROMETHEUS_OWN)
        report(not absent, "every name the dashboard and rules use is served"
               + (f"; not served: {absent}" if absent else ""))

    if use_promtool:
        promtool_parse(dq)

    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
