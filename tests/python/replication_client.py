"""A publisher that records which of its messages nsqd acknowledged, for the replication tests
(test_replication_netns.py, replication_chaos.py), run inside a network namespace with
`ip netns exec <ns> python replication_client.py produce ...`.

    produce --nsqd HOST:PORT --topic T --prefix P [--count N] [--batch B] [--rate R] [--pad K]

publishes the bodies P0, P1, ... (each followed by "." and K bytes with --pad) with gnsq's
NsqdTCPClient (a real client library's framing), one command at a time: `MPUB` of B bodies
(`PUB` when B is 1), then reads until its answer. Prints one line per command, flushed at once:

    ACK <first> <count> <ms>        OK received after <ms> milliseconds
    FAIL <first> <count> <reason>   an error frame, or the connection broke / timed out while
                                    waiting: the bodies are NOT acknowledged (they may still
                                    be delivered, as a refused publish may be)
    DOWN <reason>                   could not connect; nothing was sent (retried after 0.2 s)

and `DONE <acked> <failed>` at the end. `--count 0` publishes until SIGTERM/SIGINT (the command
in progress is finished first). `--rate` caps the offered msgs/s. After a FAIL the connection is
dropped and a new one made (nsqd closes it after a fatal E_*PUB_FAILED anyway).

    finish_some --nsqd HOST:PORT --topic T --channel C --rdy R --fin F

a consumer on the raw V2 protocol (no library: the point is its exact behaviour) that sends
`RDY R`, takes what comes, FINs the first F in one write and closes the connection at once with
the rest in flight (nsqd requeues them). Prints `FINISHED <body>` per FIN and `CLOSED <in
flight>`.

    stranger --nsqd HOST:PORT --topic T --node-id ID

a host that is no member of the replication group: it opens a replication link (magic `"  R1"`),
sends HELLO as an origin would, a PUB of one message (body `stranger-<ID>`) and reads what comes
back for 3 s. Prints `FRAME <type> <payload hex>` per frame received and `EOF` when the
connection closes (the frame layouts: docs/replication.md, "The link").
"""

import argparse
import os
import signal
import socket
import struct
import sys
import time

import gnsq
from gnsq import protocol as nsq

STOP = False


def _stop(_sig, _frame):
    global STOP
    STOP = True


def out(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def produce(args):
    host, _, port = args.nsqd.rpartition(":")
    conn = None
    # --pad: "." and that many bytes after the name; readers keep what is before the ".".
    pad = "." + "x" * args.pad if args.pad else ""
    acked = failed = 0
    i = 0
    started = time.monotonic()
    while not STOP and (args.count == 0 or i < args.count):
        if args.rate:
            ahead = i / args.rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        if conn is None:
            try:
                conn = gnsq.NsqdTCPClient(host, int(port), timeout=args.timeout)
                conn.connect()
            except Exception as e:  # noqa: BLE001 - any connect failure: retry
                out(f"DOWN {type(e).__name__}: {e}")
                conn = None
                time.sleep(0.2)
                continue
        n = args.batch if args.count == 0 else min(args.batch, args.count - i)
        bodies = [f"{args.prefix}{k}{pad}".encode() for k in range(i, i + n)]
        t0 = time.monotonic()
        try:
            if n == 1:
                conn.publish(args.topic, bodies[0])
            else:
                conn.multipublish(args.topic, bodies)
            while True:
                frame, data = conn.read_response()
                if frame == nsq.FRAME_TYPE_RESPONSE and data == nsq.HEARTBEAT:
                    continue  # answered with NOP by gnsq
                break
            if frame == nsq.FRAME_TYPE_RESPONSE and data == nsq.OK:
                out(f"ACK {i} {n} {(time.monotonic() - t0) * 1000:.1f}")
                acked += n
            else:
                out(f"FAIL {i} {n} {data!r}")
                failed += n
                conn.close_stream()
                conn = None
        except Exception as e:  # noqa: BLE001 - broken connection or timeout: not acknowledged
            out(f"FAIL {i} {n} {type(e).__name__}: {e}")
            failed += n
            try:
                conn.close_stream()
            except Exception:  # noqa: BLE001
                pass
            conn = None
            time.sleep(0.2)
        i += n
    if conn is not None:
        try:
            conn.close_stream()
        except Exception:  # noqa: BLE001
            pass
    out(f"DONE {acked} {failed}")


def read_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def finish_some(args):
    host, _, port = args.nsqd.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(b"  V2")
    sock.sendall(f"SUB {args.topic} {args.channel}\n".encode())
    size, kind = struct.unpack(">II", read_exact(sock, 8))
    data = read_exact(sock, size - 4)
    assert (kind, data) == (0, b"OK"), (kind, data)
    sock.sendall(f"RDY {args.rdy}\n".encode())
    # Take everything RDY allows (until 1 s passes without a message), then FIN the first F in
    # one write and close at once, the rest still in flight: nsqd handles the FINs and the
    # close's requeue back to back.
    received = []
    sock.settimeout(1.0)
    try:
        while len(received) < args.rdy:
            size, kind = struct.unpack(">II", read_exact(sock, 8))
            data = read_exact(sock, size - 4)
            if kind == 0 and data == b"_heartbeat_":
                sock.sendall(b"NOP\n")
            elif kind == 2:
                received.append((data[10:26], data[26:]))
    except (socket.timeout, EOFError):
        pass
    fins = received[:args.fin]
    sock.sendall(b"".join(b"FIN " + msg_id + b"\n" for msg_id, _ in fins))
    sock.close()
    for _, body in fins:
        out(f"FINISHED {body.decode()}")
    out(f"CLOSED {len(received) - len(fins)}")


def frame(kind, payload):
    return struct.pack(">IB", 1 + len(payload), kind) + payload


def str8(s):
    b = s.encode()
    return struct.pack(">B", len(b)) + b


def stranger(args):
    host, _, port = args.nsqd.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    hello = struct.pack(">HQQBQQHIH", 1, args.node_id, 1, 0, 0, 0, 2, 16 << 20, 999)
    hello += str8("10.231.0.250") + struct.pack(">HH", 4150, 4151)
    sock.sendall(b"  R1" + frame(0x01, hello))
    body = f"stranger-{args.node_id}".encode()
    msg_id = os.urandom(8).hex().encode()
    # What a real origin sends after a WELCOME asking for a catch-up: CATCHUP_BEGIN at seq 0,
    # then the publish (seq 1), then CATCHUP_END; sent unconditionally.
    pub = struct.pack(">Q", 1) + str8(args.topic) + struct.pack(">qH", 0, 0)
    pub += struct.pack(">I", 1) + msg_id + struct.pack(">qI", time.time_ns(), len(body)) + body
    try:
        sock.sendall(frame(0x08, struct.pack(">Q", 0)) + frame(0x02, pub)
                     + frame(0x09, struct.pack(">Q", 1)))
    except OSError as e:
        out(f"SENDFAIL {e}")
    sock.settimeout(3.0)
    try:
        while True:
            size = struct.unpack(">I", read_exact(sock, 4))[0]
            data = read_exact(sock, size)
            out(f"FRAME {data[0]:02x} {data[1:].hex()}")
    except EOFError:
        out("EOF")
    except (socket.timeout, ConnectionResetError) as e:
        out(f"END {type(e).__name__}")
    sock.close()


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--nsqd", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--count", type=int, default=0)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--rate", type=float, default=0)
    p.add_argument("--pad", type=int, default=0, help="bytes added to each body after a '.'")
    # Longer than --replication-ack-timeout (10 s): nsqd answers first.
    p.add_argument("--timeout", type=float, default=30.0)
    f = sub.add_parser("finish_some")
    f.add_argument("--nsqd", required=True)
    f.add_argument("--topic", required=True)
    f.add_argument("--channel", required=True)
    f.add_argument("--rdy", type=int, required=True)
    f.add_argument("--fin", type=int, required=True)
    s = sub.add_parser("stranger")
    s.add_argument("--nsqd", required=True)
    s.add_argument("--topic", required=True)
    s.add_argument("--node-id", type=int, required=True)
    args = parser.parse_args()
    if args.mode == "finish_some":
        return finish_some(args)
    if args.mode == "stranger":
        return stranger(args)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    produce(args)


if __name__ == "__main__":
    sys.exit(main())
