#!/usr/bin/env python3
# Issue 29, "Leaving on purpose": how long a draining nsqd with replication takes to hand its
# unsettled messages to its replica set and exit. docs/replication.md, "Leaving on purpose".
#
# Usage: bench/leave.py path/to/nsqd [MESSAGES (100000)] [SIZE (200)]
#
# Three nsqd on 127.0.0.1 with --replicas=2, each listing the other two, takeover timeout 60 s
# (far longer than a planned leave may take: it does not wait for it). MESSAGES bodies of SIZE
# bytes are published to A with MPUB (batches of 200) to topic t, channel c (no consumer, so
# all stay unsettled). Then PUT /config/drain on A, and the time until A's process exits, and
# until A's replica set member holds all of them in t/c. Prints one RESULT line.
import json, os, socket, struct, subprocess, sys, tempfile, time, urllib.request

NSQD = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
SIZE = int(sys.argv[3]) if len(sys.argv) > 3 else 200


def free():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    p = s.getsockname()[1]
    s.close()
    return p


ports = {k: (free(), free()) for k in 'ABC'}
dirs = {k: tempfile.mkdtemp() for k in 'ABC'}


def start(k):
    t, h = ports[k]
    peers = [f'--replication-peer=127.0.0.1:{ports[o][0]}' for o in 'ABC' if o != k]
    args = [NSQD, f'--tcp-address=127.0.0.1:{t}', f'--http-address=127.0.0.1:{h}',
            f'--data-path={dirs[k]}', '--replicas=2', '--replication-takeover-timeout=60s', *peers]
    return subprocess.Popen(args, stderr=subprocess.DEVNULL)


def http(k, path, method='GET'):
    req = urllib.request.Request(f'http://127.0.0.1:{ports[k][1]}{path}', method=method)
    return urllib.request.urlopen(req, timeout=30).read()


def stats(k):
    return json.loads(http(k, '/stats?format=json'))


def depth(k):
    for t in stats(k)['topics']:
        for c in t['channels']:
            if t['topic_name'] == 't' and c['channel_name'] == 'c':
                return c['depth'] + c['in_flight_count'] + c['deferred_count']
    return 0


def wait(cond, what, limit=300):
    t0 = time.time()
    while time.time() - t0 < limit:
        try:
            if cond():
                return
        except Exception:
            pass
        time.sleep(0.05)
    raise SystemExit(f'timeout: {what}')


procs = {k: start(k) for k in 'ABC'}
try:
    for k in 'ABC':
        wait(lambda: stats(k), f'{k} up')
    wait(lambda: all(p['state'] == 'connected' for p in stats('A')['replication']['peers']), 'links')
    http('A', '/topic/create?topic=t', 'POST')
    http('A', '/channel/create?topic=t&channel=c', 'POST')
    s = socket.create_connection(('127.0.0.1', ports['A'][0]))
    s.sendall(b'  V2')
    body = b'x' * SIZE
    batch = 200
    for i in range(0, N, batch):
        n = min(batch, N - i)
        payload = struct.pack('>I', n) + (struct.pack('>I', SIZE) + body) * n
        s.sendall(b'MPUB t\n' + struct.pack('>I', len(payload)) + payload)
        head = s.recv(8)
        size, kind = struct.unpack('>II', head)
        rest = b''
        while len(rest) < size - 4:
            rest += s.recv(size - 4 - len(rest))
        assert kind == 0 and rest == b'OK', rest
    s.close()
    assert depth('A') == N, depth('A')
    t0 = time.time()
    http('A', '/config/drain', 'PUT')
    procs['A'].wait(timeout=300)
    exited = time.time() - t0
    wait(lambda: depth('B') + depth('C') == N, 'the taker holds every message')
    held = time.time() - t0
    taker = 'B' if depth('B') else 'C'
    print(f'RESULT messages={N} size={SIZE} exit_code={procs["A"].returncode} '
          f'exited_s={exited:.2f} taker_holds_all_s={held:.2f} taker={taker} '
          f'taker_depth={depth(taker)}')
finally:
    for p in procs.values():
        if p.poll() is None:
            p.kill()
