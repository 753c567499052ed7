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
"""

import argparse
import signal
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
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    produce(args)


if __name__ == "__main__":
    sys.exit(main())
