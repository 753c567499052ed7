"""A gnsq producer or consumer, run by test_cluster_netns.py inside a network namespace
(`ip netns exec <ns> python cluster_client.py ...`), so that the client sits on another
"host" than the daemons it talks to.

    consume --topic T --channel C --lookupd http://A:4161 --lookupd http://B:4161
        discovers nsqd through both lookupds (gnsq polls them in turn) and prints
        `MSG <body>` for every message (finished at once), `CONN <host:port>` when a
        connection to an nsqd is up, until killed.
    produce --nsqd 127.0.0.1:4150 --topic T --prefix P --count N
        publishes the bodies P0 .. P(N-1) (MPUB in batches of 50) and prints `PUBLISHED N`.
"""

import argparse
import logging
import os
import sys

import gevent
import gnsq


def consume(args):
    if os.environ.get("CLUSTER_CLIENT_DEBUG"):
        logging.basicConfig(level=logging.DEBUG)

    class Consumer(gnsq.Consumer):
        def handle_connection_success(self, conn):
            print(f"CONN {conn.address}:{conn.port}", flush=True)
            super().handle_connection_success(conn)

        def _redistribute_ready_state(self):
            # gnsq 1.0.2 lists a connection before it has connected; sending it RDY then
            # raises AttributeError (no `stream` yet) after recording the RDY count as sent,
            # which ends the RDY greenlet for good and leaves that connection at RDY 0 on
            # the nsqd. Forget the unsent count and try again shortly instead.
            try:
                super()._redistribute_ready_state()
            except AttributeError:
                for conn in self._connections:
                    if not hasattr(conn, "stream"):
                        conn.ready_count = 0
                gevent.spawn_later(0.1, self.redistribute_ready_state)

    consumer = Consumer(
        args.topic,
        args.channel,
        lookupd_http_addresses=args.lookupd,
        # Poll often (one lookupd per poll, round robin) so discovery follows the cluster
        # within seconds; the default is 60 s.
        lookupd_poll_interval=0.5,
        lookupd_poll_jitter=0.1,
        max_in_flight=200,
    )

    @consumer.on_message.connect
    def handler(_consumer, message):
        print("MSG " + message.body.decode(), flush=True)

    consumer.start()


def produce(args):
    producer = gnsq.Producer([args.nsqd])
    producer.start()
    bodies = [f"{args.prefix}{i}".encode() for i in range(args.count)]
    for start in range(0, len(bodies), 50):
        producer.multipublish(args.topic, bodies[start : start + 50])
    producer.close()
    producer.join()
    print(f"PUBLISHED {args.count}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("consume")
    c.add_argument("--topic", required=True)
    c.add_argument("--channel", required=True)
    c.add_argument("--lookupd", action="append", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--nsqd", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--count", type=int, required=True)
    args = parser.parse_args()
    {"consume": consume, "produce": produce}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
