#!/usr/bin/env python3
"""Connection-burst memory check for nsqd (issue 9, defect 5).

usage: conn_burst.py NSQD_PID TCP_PORT [CONNS=10000] [ROUNDS=3]

Each round opens CONNS idle V2 connections (connect + the "  V2" magic), waits 1 s, prints the
daemon's VmRSS and the bytes per connection over the pre-burst value, closes them all and
prints how long RSS took to come back within 50 MB (at most 10 s). Needs an open-files limit
above CONNS.
"""
import socket
import sys
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit("no VmRSS")


def main():
    pid, port = int(sys.argv[1]), int(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    base = rss_kib(pid)
    print(f"before: RSS {base} KiB")
    for r in range(rounds):
        socks = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"  V2")
            socks.append(s)
        time.sleep(1.0)
        peak = rss_kib(pid)
        print(f"round {r}: {n} connections, RSS {peak} KiB, {(peak - base) * 1024 / n:.0f} B each")
        for s in socks:
            s.close()
        t0 = time.time()
        while time.time() - t0 < 10:
            time.sleep(0.5)
            if rss_kib(pid) - base < 50 * 1024:
                break
        print(f"  closed: RSS {rss_kib(pid)} KiB after {time.time() - t0:.1f} s")
    time.sleep(3)
    print(f"3 s later: RSS {rss_kib(pid)} KiB")


if __name__ == "__main__":
    main()
