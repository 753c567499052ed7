"""pytest plugin (loaded with ``-p compat_pytest_report``): writes one JSON record per test
node id to the file named by $COMPAT_RESULTS_OUT, for tests/compat/lib/evaluate.py.

outcome is "failed" if setup, call or teardown failed (or the module failed to collect),
"skipped" if it was skipped, else "passed".
"""
import json
import os

_results = {}
_order = []


def _record(nodeid, outcome, message=""):
    if nodeid not in _results:
        _order.append(nodeid)
        _results[nodeid] = {"id": nodeid, "outcome": outcome, "message": message}
        return
    prev = _results[nodeid]
    rank = {"passed": 0, "skipped": 1, "failed": 2}
    if rank[outcome] > rank[prev["outcome"]]:
        prev["outcome"] = outcome
        prev["message"] = message


def _message(report):
    text = getattr(report, "longreprtext", "") or str(report.longrepr or "")
    lines = [l for l in text.splitlines() if l.strip()]
    # the most useful line of a pytest failure is usually the last "E ..." line
    errs = [l for l in lines if l.lstrip().startswith("E ")]
    pick = errs[-1] if errs else (lines[-1] if lines else "")
    return f"{report.when}: {pick.strip()}"[:500]


def pytest_collectreport(report):
    if report.failed:
        _record(report.nodeid or "<collection>", "failed", "collection: " + _message(report))


def pytest_runtest_logreport(report):
    if report.failed:
        _record(report.nodeid, "failed", _message(report))
    elif report.skipped:
        _record(report.nodeid, "skipped", "")
    elif report.when == "call":
        _record(report.nodeid, "passed", "")


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("COMPAT_RESULTS_OUT")
    if not out:
        return
    with open(out, "w") as f:
        json.dump([_results[k] for k in _order], f, indent=1)
