#!/usr/bin/env python3
"""Checks contrib/docker/docker-compose.yml beyond its schema (docker-compose config does that):

- 2 nsqlookupd, 3 nsqd, nsqadmin and Prometheus, the nsq services on the image nsq-rs;
- each nsqd: --replicas=2, a --replication-peer for each other nsqd (host:4150) and none for
  itself, a --lookupd-tcp-address for each nsqlookupd, --broadcast-address its service name,
  a volume at /data; nsqadmin: a --lookupd-http-address for each nsqlookupd;
- every --flag given to a daemon is one its binary knows (`<bin> --help` of BIN_DIR), when
  a BIN_DIR is given;
- Prometheus mounts contrib/prometheus/{prometheus.yml,alerts.yml}, and prometheus.yml scrapes
  every nsq service on its HTTP port in the jobs nsqd, nsqlookupd and nsqadmin.

Usage: check_compose.py [BIN_DIR]. Needs PyYAML (Debian's python3-yaml); exits 1 on a failure.
"""

import re
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
COMPOSE = HERE / "docker-compose.yml"
PROM = HERE.parent / "prometheus" / "prometheus.yml"
HTTP_PORT = {"nsqd": 4151, "nsqlookupd": 4161, "nsqadmin": 4171}
errors = []


def check(ok, what):
    if not ok:
        errors.append(what)


def flags(cmd):
    out = {}
    for a in cmd[1:]:
        m = re.fullmatch(r"--([a-z0-9-]+)(?:=(.*))?", a)
        check(m is not None, f"argument {a!r} is not --flag=value")
        if m:
            out.setdefault(m.group(1), []).append(m.group(2))
    return out


def main(argv):
    bin_dir = Path(argv[0]) if argv else None
    doc = yaml.safe_load(COMPOSE.read_text())
    services = doc["services"]
    by_kind = {}
    for name, svc in services.items():
        cmd = svc.get("command")
        if isinstance(cmd, str):
            cmd = cmd.split()
        kind = cmd[0] if cmd and cmd[0] in HTTP_PORT else name
        by_kind.setdefault(kind, []).append(name)
        if kind in HTTP_PORT:
            check(str(svc.get("image", "")).startswith("nsq-rs:"), f"{name}: image {svc.get('image')}")
            svc["_flags"] = flags(cmd)
            if bin_dir:
                r = subprocess.run([str(bin_dir / kind), "--help"], capture_output=True, text=True)
                helptext = r.stdout + r.stderr
                for f in svc["_flags"]:
                    check(re.search(rf"^\s+-{re.escape(f)}\b", helptext, re.M) is not None,
                          f"{name}: {kind} has no flag --{f}")
    lookupds, nsqds = by_kind.get("nsqlookupd", []), by_kind.get("nsqd", [])
    check(len(lookupds) == 2, f"nsqlookupd services: {lookupds} (want 2)")
    check(len(nsqds) == 3, f"nsqd services: {nsqds} (want 3)")
    check(len(by_kind.get("nsqadmin", [])) == 1, "one nsqadmin service")
    check("prometheus" in services, "a prometheus service")

    for n in nsqds:
        f = services[n]["_flags"]
        check(f.get("replicas") == ["2"], f"{n}: --replicas={f.get('replicas')} (want 2)")
        peers = sorted(f.get("replication-peer", []))
        check(peers == sorted(f"{o}:4150" for o in nsqds if o != n), f"{n}: --replication-peer {peers}")
        check(sorted(f.get("lookupd-tcp-address", [])) == sorted(f"{l}:4160" for l in lookupds),
              f"{n}: --lookupd-tcp-address {f.get('lookupd-tcp-address')}")
        check(f.get("broadcast-address") == [n], f"{n}: --broadcast-address {f.get('broadcast-address')}")
        check(any(str(v).endswith(":/data") for v in services[n].get("volumes", [])), f"{n}: no volume at /data")
    for a in by_kind.get("nsqadmin", []):
        f = services[a]["_flags"]
        check(sorted(f.get("lookupd-http-address", [])) == sorted(f"{l}:4161" for l in lookupds),
              f"{a}: --lookupd-http-address {f.get('lookupd-http-address')}")

    vols = " ".join(map(str, services.get("prometheus", {}).get("volumes", [])))
    for f in ("prometheus.yml", "alerts.yml"):
        check(f"../prometheus/{f}:/etc/prometheus/{f}" in vols, f"prometheus does not mount {f}")
    prom = yaml.safe_load(PROM.read_text())
    check(prom.get("rule_files") == ["alerts.yml"], f"prometheus.yml rule_files {prom.get('rule_files')}")
    jobs = {j["job_name"]: sorted(t for sc in j.get("static_configs", []) for t in sc["targets"])
            for j in prom["scrape_configs"]}
    for kind, port in HTTP_PORT.items():
        want = sorted(f"{n}:{port}" for n in by_kind.get(kind, []))
        check(jobs.get(kind) == want, f"prometheus.yml job {kind}: {jobs.get(kind)} (want {want})")

    for e in errors:
        print(f"check-compose: {e}")
    print(f"check-compose: {len(services)} services ({', '.join(f'{len(v)} {k}' for k, v in by_kind.items())}), "
          f"prometheus jobs {sorted(jobs)}: {len(errors)} problem(s)"
          + ("" if bin_dir else " (flags not checked against binaries: no BIN_DIR)"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
