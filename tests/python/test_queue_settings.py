"""Queue settings (README, "Beyond NSQ: queue settings") through real clients: a channel's
`max_depth` with `overflow=refuse` under load from gnsq publishers (TCP, through gnsq's
Producer, and HTTP) while a slow gnsq Consumer reads. The refusal reaches each client as
NSQ's error (`E_PUB_FAILED PUB failed topic T is full`, HTTP 503), every acknowledged
message is delivered exactly once, and nothing of a refused publish is ever delivered."""

import collections
import json
import signal
import urllib.request

import gevent
import gnsq
from gnsq import errors

from conftest import find_channel, wait_for

BOUND = 300


def post(nsqd, path):
    req = urllib.request.Request(f"http://{nsqd.http_host}:{nsqd.http_port}{path}", method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.read()

def requeue_until_dead_lettered(nsqd, topic, config):
    """Sets `config` on channel `ch` of `topic`, publishes 20 bodies and runs a gnsq Consumer
    that requeues everything (its own give-up point set far away) until the channel counts
    all 20 as dead-lettered, and a second more; returns (bodies, deliveries per body)."""
    post(nsqd, f"/topic/create?topic={topic}")
    post(nsqd, f"/channel/create?topic={topic}&channel=ch")
    status, body = post(nsqd, f"/channel/config?topic={topic}&channel=ch&{config}")
    assert status == 200, body
    bodies = [f"poison-{i}".encode() for i in range(20)]
    http = nsqd.http()
    http.multipublish(topic, bodies)
    deliveries = collections.Counter()

    def handler(consumer, message):
        deliveries[message.body] += 1
        raise errors.NSQRequeueMessage(backoff=False)

    consumer = gnsq.Consumer(topic, "ch", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=10,
                             max_tries=1000, requeue_delay=0, message_handler=handler)
    consumer.start(block=False)
    try:
        wait_for(lambda: (find_channel(http.stats(topic=topic), topic, "ch") or {}).get("dead_lettered_count")
                 == len(bodies), timeout=60, message="every message at its max attempts")
        gevent.sleep(1)  # nothing more arrives on the channel
    finally:
        consumer.close()
        consumer.join(timeout=30)
    return bodies, deliveries


def test_refuse_at_the_bound_under_load(nsqd, topic):
    post(nsqd, f"/topic/create?topic={topic}")
    post(nsqd, f"/channel/create?topic={topic}&channel=ch")
    status, body = post(nsqd, f"/channel/config?topic={topic}&channel=ch&max_depth={BOUND}")
    assert status == 200, body
    assert json.loads(body)["settings"]["max_depth"] == {"value": BOUND, "source": "set"}

    acked, refused, errs = [], [], collections.Counter()
    running = True

    def tcp_publisher(name):
        producer = gnsq.Producer(nsqd_tcp_addresses=[nsqd.tcp_address])
        producer.start()
        i = 0
        try:
            while running:
                body = f"{name}-{i}".encode()
                try:
                    assert producer.publish(topic, body) == b"OK"
                    acked.append(body)
                    i += 1
                except errors.NSQPubFailed as e:
                    # gnsq raises E_PUB_FAILED as this class, with the text after the code.
                    refused.append(body)
                    errs[f"E_PUB_FAILED {e}"] += 1
                    i += 1
                except errors.NSQNoConnections:
                    # The refusal closed the connection (fatal, as every NSQ publish error);
                    # the Producer reconnects: this body was never sent.
                    gevent.sleep(0.05)
        finally:
            producer.close()
            producer.join(timeout=30)

    def http_publisher():
        http = nsqd.http()
        i = 0
        while running:
            body = f"http-{i}".encode()
            i += 1
            try:
                http.publish(topic, body)
                acked.append(body)
            except errors.NSQHttpError as e:
                refused.append(body)
                errs[str(e)] += 1
                gevent.sleep(0.01)

    received = collections.Counter()

    def handler(consumer, message):
        received[message.body] += 1
        gevent.sleep(0.002)  # slower than the publishers: the channel fills to its bound

    consumer = gnsq.Consumer(topic, "ch", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=20,
                             message_handler=handler)
    consumer.start(block=False)
    pubs = [gevent.spawn(tcp_publisher, f"tcp{n}") for n in range(3)] + [gevent.spawn(http_publisher)]
    try:
        gevent.sleep(6)
        running = False
        gevent.joinall(pubs, timeout=60, raise_error=True)
        assert refused, f"no publish refused ({len(acked)} acknowledged): the bound was never reached"
        assert set(errs) == {f"E_PUB_FAILED b'PUB failed topic {topic} is full'", "http error <503>"}, errs
        wait_for(lambda: set(received) >= set(acked), timeout=120,
                 message=f"{len(set(acked) - set(received))} acknowledged messages to arrive")
        http = nsqd.http()

        def settled():
            c = find_channel(http.stats(topic=topic), topic, "ch")
            return c if c and c["depth"] == 0 and c["in_flight_count"] == 0 else None
        wait_for(settled, timeout=60, message="the channel to drain")
    finally:
        consumer.close()
        consumer.join(timeout=30)
    delivered_refused = set(refused) & set(received)
    assert not delivered_refused, f"{len(delivered_refused)} refused messages delivered"
    dups = [b for b, n in received.items() if n > 1]
    assert not dups, f"{len(dups)} delivered twice"
    assert set(received) == set(acked)
    print(f"max_depth {BOUND}: {len(acked)} acknowledged and delivered once, {len(refused)} refused "
          f"({dict(errs)})")


def test_ttl_on_a_paused_channel_in_memory_and_on_disk(nsqd_factory, topic):
    """Published while the channel is paused, older than the TTL when it is unpaused: a gnsq
    Consumer gets only the younger messages; `expired_count` counts the rest."""
    for flags in ((), ("--mem-queue-size=0",)):
        nsqd = nsqd_factory(*flags)
        post(nsqd, f"/topic/create?topic={topic}")
        post(nsqd, f"/channel/create?topic={topic}&channel=ch")
        status, body = post(nsqd, f"/channel/config?topic={topic}&channel=ch&ttl=500ms")
        assert status == 200, body
        post(nsqd, f"/channel/pause?topic={topic}&channel=ch")
        producer = gnsq.Producer(nsqd_tcp_addresses=[nsqd.tcp_address])
        producer.start()
        try:
            old = [f"old-{i}".encode() for i in range(200)]
            assert producer.multipublish(topic, old) == b"OK"
            gevent.sleep(0.8)
            new = [f"new-{i}".encode() for i in range(50)]
            assert producer.multipublish(topic, new) == b"OK"
        finally:
            producer.close()
            producer.join(timeout=30)
        post(nsqd, f"/channel/unpause?topic={topic}&channel=ch")
        received = collections.Counter()

        def handler(consumer, message):
            received[message.body] += 1

        consumer = gnsq.Consumer(topic, "ch", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=100,
                                 message_handler=handler)
        consumer.start(block=False)
        try:
            wait_for(lambda: len(received) >= len(new), timeout=60, message="the younger messages")
            gevent.sleep(0.5)
        finally:
            consumer.close()
            consumer.join(timeout=30)
        assert set(received) == set(new), flags
        c = find_channel(nsqd.http().stats(topic=topic), topic, "ch")
        assert (c["expired_count"], c["depth"]) == (len(old), 0), (flags, c)


def test_max_attempts_with_a_consumer_that_always_requeues(nsqd, topic):
    """A consumer that requeues everything: each message is delivered `max_attempts` times
    on the channel and never again, and counted."""
    bodies, deliveries = requeue_until_dead_lettered(nsqd, topic, "max_attempts=3")
    assert dict(deliveries) == {b: 3 for b in bodies}
    c = find_channel(nsqd.http().stats(topic=topic), topic, "ch")
    assert (c["depth"], c["in_flight_count"], c["deferred_count"]) == (0, 0, 0), c


def test_settings_survive_sigkill_and_sigterm_restarts(nsqd_factory, topic, tmp_path):
    """Settings are written to nsqd.dat when set: a kill -9 right after (durable mode) and a
    clean restart both find them, and they are enforced."""
    data = tmp_path / "data-restart"
    data.mkdir()
    nsqd = nsqd_factory("--durable", data_path=data)
    post(nsqd, f"/topic/create?topic={topic}")
    post(nsqd, f"/channel/create?topic={topic}&channel=ch")
    post(nsqd, f"/topic/config?topic={topic}&ttl=1h")
    post(nsqd, f"/channel/config?topic={topic}&channel=ch&max_attempts=4&max_depth=5")
    for sig in (signal.SIGKILL, signal.SIGTERM):
        nsqd.stop(sig)
        nsqd = nsqd_factory("--durable", data_path=data)
        with urllib.request.urlopen(f"http://{nsqd.http_host}:{nsqd.http_port}/channel/config?topic={topic}&channel=ch",
                                    timeout=30) as r:
            s = json.loads(r.read())["settings"]
        assert s["max_attempts"] == {"value": 4, "source": "set"}, (sig, s)
        assert s["ttl"] == {"value": "1h0m0s", "source": "topic"}, (sig, s)
        assert s["max_depth"] == {"value": 5, "source": "set"}, (sig, s)
    http = nsqd.http()
    for i in range(5):
        http.publish(topic, f"m{i}".encode())
    try:
        http.publish(topic, b"one too many")
        raise AssertionError("the sixth publish was accepted past max_depth 5")
    except errors.NSQHttpError as e:
        assert "503" in str(e), e


def test_dead_letters_reach_a_pynsq_consumer_of_the_dead_letter_topic(nsqd, topic):
    """A gnsq Consumer that always requeues, `max_attempts=3` and a dead-letter topic: each
    message is delivered 3 times on the channel, then published to the dead-letter topic
    (same body) where a pynsq Reader gets it once; never again on the channel."""
    import asyncio

    import nsq

    dead = f"{topic}_dead"
    bodies, deliveries = requeue_until_dead_lettered(nsqd, topic, f"max_attempts=3&dead_letter_topic={dead}")
    http = nsqd.http()
    assert dict(deliveries) == {b: 3 for b in bodies}

    received = collections.Counter()

    async def read_dead_letters():
        def on_message(message):
            received[message.body] += 1
            return True

        reader = nsq.Reader(topic=dead, channel="inspect", message_handler=on_message,
                            nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=50)
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while len(received) < len(bodies) and loop.time() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
        finally:
            reader.close()
            await asyncio.sleep(0.1)

    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(read_dead_letters())
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    assert dict(received) == {b: 1 for b in bodies}
    c = find_channel(http.stats(topic=topic), topic, "ch")
    assert (c["depth"], c["in_flight_count"], c["deferred_count"]) == (0, 0, 0), c


def test_kill_during_dead_lettering_loses_nothing(nsqd_factory, topic, tmp_path):
    """--durable, max_attempts=1 with a dead-letter topic, a gnsq consumer requeueing
    everything, and kill -9 in the middle of it: after the restart every acknowledged message
    is either still delivered on the channel or in the dead-letter topic (duplicates in the
    dead-letter topic allowed, no loss)."""
    import random

    dead = f"{topic}_dead"
    data = tmp_path / "data-kill"
    data.mkdir()
    nsqd = nsqd_factory("--durable", data_path=data)
    post(nsqd, f"/topic/create?topic={topic}")
    post(nsqd, f"/channel/create?topic={topic}&channel=ch")
    post(nsqd, f"/topic/create?topic={dead}")
    post(nsqd, f"/channel/create?topic={dead}&channel=inspect")
    post(nsqd, f"/channel/config?topic={topic}&channel=ch&max_attempts=1&dead_letter_topic={dead}")
    bodies = [f"m-{i}".encode() for i in range(2000)]
    http = nsqd.http()
    for i in range(0, len(bodies), 200):
        http.multipublish(topic, bodies[i:i + 200])

    def requeue(consumer, message):
        raise errors.NSQRequeueMessage(backoff=False)

    consumer = gnsq.Consumer(topic, "ch", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=50,
                             max_tries=1000, requeue_delay=0, message_handler=requeue)
    consumer.start(block=False)
    gevent.sleep(random.uniform(0.05, 0.4))
    nsqd.stop(signal.SIGKILL)
    consumer.close()
    consumer.join(timeout=30)

    nsqd = nsqd_factory("--durable", data_path=data)
    got = collections.Counter()

    def fin(consumer, message):
        got[message.body] += 1

    readers = [gnsq.Consumer(t, c, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=100,
                             message_handler=fin) for t, c in ((topic, "ch"), (dead, "inspect"))]
    for r in readers:
        r.start(block=False)
    try:
        wait_for(lambda: set(got) >= set(bodies), timeout=90,
                 message=f"every message on the channel or in the dead-letter topic ({len(set(bodies) - set(got))} missing)")
    finally:
        for r in readers:
            r.close()
            r.join(timeout=30)
    dead_lettered = find_channel(nsqd.http().stats(topic=topic), topic, "ch") or {}
    print(f"kill during dead-lettering: all {len(bodies)} found, {sum(got.values()) - len(bodies)} duplicates, "
          f"{dead_lettered.get('dead_lettered_count', 0)} dead-lettered after the restart")


def test_drop_oldest_keeps_the_newest_max_depth(nsqd, topic):
    """`overflow=drop_oldest`: a gnsq Producer publishes 1,000 messages to a channel bounded
    at 100 with no consumer; none fails, and a gnsq Consumer then gets exactly the newest
    100, in order; `dropped_count` is 900."""
    post(nsqd, f"/topic/create?topic={topic}")
    post(nsqd, f"/channel/create?topic={topic}&channel=ch")
    status, body = post(nsqd, f"/channel/config?topic={topic}&channel=ch&max_depth=100&overflow=drop_oldest")
    assert status == 200, body
    producer = gnsq.Producer(nsqd_tcp_addresses=[nsqd.tcp_address])
    producer.start()
    try:
        bodies = [f"m-{i:04d}".encode() for i in range(1000)]
        for i in range(0, 1000, 50):
            assert producer.multipublish(topic, bodies[i:i + 50]) == b"OK"
    finally:
        producer.close()
        producer.join(timeout=30)
    got = []

    def handler(consumer, message):
        got.append(message.body)

    consumer = gnsq.Consumer(topic, "ch", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=1,
                             message_handler=handler)
    consumer.start(block=False)
    try:
        wait_for(lambda: len(got) >= 100, timeout=60, message="the newest 100")
        gevent.sleep(0.5)
    finally:
        consumer.close()
        consumer.join(timeout=30)
    assert got == bodies[-100:]
    c = find_channel(nsqd.http().stats(topic=topic), topic, "ch")
    assert (c["dropped_count"], c["depth"]) == (900, 0), c


def test_max_bytes_refuses_a_gnsq_publisher(nsqd_factory, topic):
    """A channel's `max_bytes` (each message counts 4 + 26 + body bytes, in memory and on
    disk: `--mem-queue-size=10` puts most of them on disk): a gnsq Producer publishing
    100-byte bodies gets `E_PUB_FAILED ... is full` (PUB) and `E_MPUB_FAILED` (MPUB, all or
    nothing) once the next one would pass it; a gnsq Consumer then gets every acknowledged
    message once and nothing refused; drained, the channel takes publishes again."""
    nsqd = nsqd_factory("--mem-queue-size=10")
    post(nsqd, f"/topic/create?topic={topic}")
    post(nsqd, f"/channel/create?topic={topic}&channel=ch")
    bound = 61 * 130 + 100  # 61 records fit, not 62
    status, body = post(nsqd, f"/channel/config?topic={topic}&channel=ch&max_bytes={bound}")
    assert status == 200, body
    assert json.loads(body)["settings"]["max_bytes"] == {"value": bound, "source": "set"}

    acked, refused, errs = [], [], collections.Counter()
    producer = gnsq.Producer(nsqd_tcp_addresses=[nsqd.tcp_address])
    producer.start()

    def send(bodies):
        """One publish, retried while the Producer reconnects (a refusal closes the
        connection, as every NSQ publish error): acknowledged or refused."""
        for _ in range(400):
            try:
                if len(bodies) == 1:
                    assert producer.publish(topic, bodies[0]) == b"OK"
                else:
                    assert producer.multipublish(topic, bodies) == b"OK"
                acked.extend(bodies)
                return
            except (errors.NSQPubFailed, errors.NSQMPubFailed) as e:
                refused.extend(bodies)
                errs[f"{type(e).__name__} {e}"] += 1
                return
            except errors.NSQNoConnections:
                gevent.sleep(0.05)
        raise AssertionError("the Producer did not reconnect")

    try:
        for i in range(65):
            send([f"{i:03d}".encode().ljust(100, b".")])
        send([f"mpub-{i}".encode().ljust(100, b".") for i in range(3)])
    finally:
        producer.close()
        producer.join(timeout=30)
    assert len(acked) == 61, (len(acked), errs)
    assert dict(errs) == {
        f"NSQPubFailed b'PUB failed topic {topic} is full'": 4,
        f"NSQMPubFailed b'MPUB failed topic {topic} is full'": 1,
    }, errs
    http = nsqd.http()
    c = find_channel(http.stats(topic=topic), topic, "ch")
    assert (c["depth"], c["backend_depth"]) == (61, 51), c

    received = collections.Counter()

    def handler(consumer, message):
        received[message.body] += 1

    consumer = gnsq.Consumer(topic, "ch", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=20,
                             message_handler=handler)
    consumer.start(block=False)
    try:
        wait_for(lambda: len(received) >= len(acked), timeout=60, message="the acknowledged messages")
        gevent.sleep(0.5)
    finally:
        consumer.close()
        consumer.join(timeout=30)
    assert dict(received) == {b: 1 for b in acked}
    assert not set(refused) & set(received)
    wait_for(lambda: find_channel(http.stats(topic=topic), topic, "ch")["in_flight_count"] == 0,
             timeout=30, message="the FINs")
    http.publish(topic, b"room again")
