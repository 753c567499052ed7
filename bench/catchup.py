#!/usr/bin/env python3
# Issue 28, defect 5: the catch-up of a wiped replica of a large backlog — peak RSS of the
# origin and the longest publish to the same topic meanwhile. docs/replication.md, "Who holds
# which origin's messages". Usage: bench/catchup.py path/to/nsqd MiB (e.g. 200).
import json, os, socket, struct, subprocess, sys, tempfile, threading, time, urllib.request
NSQD, MB = sys.argv[1], int(sys.argv[2])
BODY = 20 * 1024
N = MB * 1024 * 1024 // BODY // 50 * 50
def free():
    s = socket.socket(); s.bind(('127.0.0.1', 0)); p = s.getsockname()[1]; s.close(); return p
ports = {k: (free(), free()) for k in 'ABC'}
dirs = {k: tempfile.mkdtemp() for k in 'ABC'}
def start(k):
    t, h = ports[k]
    args = [NSQD, f'--tcp-address=127.0.0.1:{t}', f'--http-address=127.0.0.1:{h}', f'--data-path={dirs[k]}', '--mem-queue-size=100', '--max-msg-size=1048576']
    if k == 'A':
        args += ['--replicas=2', f'--replication-peer=127.0.0.1:{ports["B"][0]}', f'--replication-peer=127.0.0.1:{ports["C"][0]}', '--replication-ack-timeout=60s']
    else:
        args += [f'--replication-peer=127.0.0.1:{ports["A"][0]}']
    return subprocess.Popen(args, stderr=subprocess.DEVNULL)
def stats(k):
    return json.load(urllib.request.urlopen(f'http://127.0.0.1:{ports[k][1]}/stats?format=json', timeout=30))
def wait(cond, what, limit=300):
    t0 = time.time()
    while time.time() - t0 < limit:
        try:
            if cond(): return
        except Exception: pass
        time.sleep(0.2)
    raise SystemExit(f'timeout: {what}')
def backlog(k):
    bl = stats(k).get('replication', {}).get('backlogs', [])
    return bl[0] if bl else None
def rss(pid):
    for l in open(f'/proc/{pid}/status'):
        if l.startswith('VmRSS'): return int(l.split()[1]) // 1024
procs = {k: start(k) for k in 'ABC'}
try:
    for k in 'ABC': wait(lambda: stats(k), f'{k} up')
    wait(lambda: all(p['state']=='connected' for p in stats('A')['replication']['peers']), 'links')
    c = socket.create_connection(('127.0.0.1', ports['A'][0])); c.sendall(b'  V2')
    def cmd(b):
        c.sendall(b)
        while True:
            hdr = c.recv(8, socket.MSG_WAITALL); n, ft = struct.unpack('>ii', hdr)
            data = c.recv(n - 4, socket.MSG_WAITALL) if n > 4 else b''
            if data != b'_heartbeat_': return ft, data
    body = b'x' * BODY
    per = 50
    for i in range(0, N, per):
        payload = struct.pack('>i', per) + b''.join(struct.pack('>i', BODY) + body for _ in range(per))
        ft, d = cmd(b'MPUB t\n' + struct.pack('>i', len(payload)) + payload)
        assert d == b'OK', d
    print(f'published {N} x {BODY} B = {N*BODY/2**20:.0f} MiB to A (topic t, no channel)', flush=True)
    try:
        wait(lambda: backlog('B')['messages'] == N and backlog('C')['messages'] == N, 'replicated', 30)
    except SystemExit:
        print(stats('B').get('replication'), stats('C').get('replication'), stats('A')['replication']); raise
    # B goes; C takes its place in A's replica set after the link timeout.
    procs['B'].terminate(); procs['B'].wait()
    wait(lambda: [p for p in stats('A')['replication']['peers'] if p['in_replica_set']][0]['address'].endswith(str(ports['C'][0])), 'C in set', 60)
    subprocess.run(['rm', '-rf', os.path.join(dirs['B'], 'replica')])
    base = rss(procs['A'].pid)
    lat, peak, stop = [], [base], False
    def publisher():
        p = socket.create_connection(('127.0.0.1', ports['A'][0])); p.sendall(b'  V2')
        while not stop:
            t0 = time.time(); p.sendall(b'PUB t\n' + struct.pack('>i', 5) + b'small')
            while True:
                hdr = p.recv(8, socket.MSG_WAITALL); n, ft = struct.unpack('>ii', hdr)
                data = p.recv(n - 4, socket.MSG_WAITALL)
                if data != b'_heartbeat_': break
            lat.append(time.time() - t0); time.sleep(0.005)
    def sampler():
        while not stop:
            peak.append(rss(procs['A'].pid)); time.sleep(0.05)
    ths = [threading.Thread(target=publisher), threading.Thread(target=sampler)]
    for t in ths: t.start()
    t0 = time.time()
    procs['B'] = start('B')
    wait(lambda: backlog('B')['messages'] >= N and [p for p in stats('A')['replication']['peers'] if p['address'].endswith(str(ports['B'][0]))][0]['catching_up'] is False and [p for p in stats('A')['replication']['peers'] if p['address'].endswith(str(ports['B'][0]))][0]['state']=='connected', 'caught up')
    took = time.time() - t0
    stop = True
    for t in ths: t.join()
    print(f'catch-up of B: {took:.1f} s; A RSS before {base} MiB, peak during {max(peak)} MiB; '
          f'{len(lat)} publishes to t meanwhile, longest {max(lat)*1000:.0f} ms, median {sorted(lat)[len(lat)//2]*1000:.1f} ms', flush=True)
finally:
    for p in procs.values(): p.terminate()
    for p in procs.values(): p.wait()
    subprocess.run(['rm', '-rf'] + list(dirs.values()))
