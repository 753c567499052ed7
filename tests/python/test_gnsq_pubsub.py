"""Publish/consume through gnsq's high-level Producer and Consumer, as an application would."""

import collections
import time

import gevent
import gevent.event
import gnsq
from gnsq import protocol as nsq

from conftest import find_channel, find_topic, wait_for


def test_producer_publish_and_multipublish_1000_consumer_gets_each_once(nsqd, topic):
    producer = gnsq.Producer(nsqd_tcp_addresses=[nsqd.tcp_address])
    producer.start()
    expected = set()
    try:
        for i in range(500):
            body = f"pub-{i}".encode()
            assert producer.publish(topic, body) == b"OK"
            expected.add(body)
        for batch in range(5):
            bodies = [f"mpub-{batch}-{i}".encode() for i in range(100)]
            assert producer.multipublish(topic, bodies) == b"OK"
            expected.update(bodies)
    finally:
        producer.close()
        producer.join(timeout=30)
    assert len(expected) == 1000

    http = nsqd.http()
    t = find_topic(http.stats(topic=topic), topic)
    assert t is not None and t["message_count"] == 1000

    received = collections.Counter()
    attempts = collections.Counter()
    done = gevent.event.Event()

    def handler(consumer, message):
        received[message.body] += 1
        attempts[message.attempts] += 1
        if sum(received.values()) >= len(expected):
            done.set()
        # returning normally makes gnsq FIN the message

    consumer = gnsq.Consumer(
        topic,
        "ch",
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=100,
        message_handler=handler,
    )
    consumer.start(block=False)
    try:
        assert done.wait(timeout=120), f"received {sum(received.values())} of 1000"

        def settled():
            c = find_channel(http.stats(topic=topic), topic, "ch")
            return c if c and c["in_flight_count"] == 0 and c["depth"] == 0 else None

        chan = wait_for(settled, message="channel to drain and all FINs to land")
        # Give a stray duplicate delivery a chance to show up before we count.
        gevent.sleep(0.5)
    finally:
        consumer.close()
        consumer.join(timeout=30)

    assert set(received) == expected
    dupes = {body: n for body, n in received.items() if n != 1}
    assert not dupes, f"bodies delivered more than once: {list(dupes.items())[:5]}"
    assert attempts == {1: 1000}
    assert chan["message_count"] == 1000
    assert chan["requeue_count"] == 0
    assert chan["timeout_count"] == 0
    assert sum(c["finish_count"] for c in chan["clients"]) == 1000


def test_consumer_requeue_with_delay_redelivers_with_attempts_2(nsqd, topic):
    http = nsqd.http()
    assert http.publish(topic, b"retry me") == b"OK"

    deliveries = []
    done = gevent.event.Event()
    delay_ms = 3000

    def handler(consumer, message):
        deliveries.append((time.monotonic(), message.id, message.attempts, message.body))
        if message.attempts == 1:
            message.requeue(time_ms=delay_ms, backoff=False)
        else:
            message.finish()
            done.set()

    consumer = gnsq.Consumer(
        topic,
        "ch",
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=10,
        message_handler=handler,
    )
    consumer.start(block=False)
    try:
        # While the requeue delay runs, the message is deferred on the channel.
        def deferred():
            c = find_channel(http.stats(topic=topic), topic, "ch")
            return c if c and c["deferred_count"] == 1 else None

        during = wait_for(deferred, message="the requeued message to be deferred")
        assert during["requeue_count"] == 1
        assert during["in_flight_count"] == 0
        assert during["depth"] == 0
        assert done.wait(timeout=60), f"deliveries so far: {deliveries}"
        chan = wait_for(
            lambda: (lambda c: c if c and c["in_flight_count"] == 0 else None)(
                find_channel(http.stats(topic=topic), topic, "ch")
            ),
            message="the final FIN to land",
        )
    finally:
        consumer.close()
        consumer.join(timeout=30)

    assert len(deliveries) == 2
    (t1, id1, att1, body1), (t2, id2, att2, body2) = deliveries
    assert (att1, att2) == (1, 2)
    assert id1 == id2
    assert body1 == body2 == b"retry me"
    # The redelivery must not come before the requeue delay (lower bound only).
    assert t2 - t1 >= (delay_ms / 1000.0) * 0.9
    assert chan["requeue_count"] == 1
    assert chan["deferred_count"] == 0
    assert chan["depth"] == 0


def test_touch_keeps_message_in_flight_past_msg_timeout(nsqd_factory, topic):
    # Messages time out after 4 s; we hold one for ~10 s, touching it every 0.5 s.
    nsqd = nsqd_factory("--msg-timeout=4s")
    http = nsqd.http()
    assert http.publish(topic, b"slow work") == b"OK"

    conn = nsqd.tcp()
    conn.connect()
    ident = conn.identify()
    assert ident["msg_timeout"] == 4000
    conn.subscribe(topic, "ch")
    frame, data = conn.read_response()
    assert (frame, data) == (nsq.FRAME_TYPE_RESPONSE, b"OK")
    conn.ready(1)
    frame, msg = conn.read_response()
    assert frame == nsq.FRAME_TYPE_MESSAGE
    assert msg.body == b"slow work" and msg.attempts == 1

    frames = []
    conn.on_message.connect(lambda c, message: frames.append(("message", message)), weak=False)
    conn.on_error.connect(lambda c, error: frames.append(("error", error)), weak=False)
    listener = gevent.spawn(conn.listen)
    try:
        start = time.monotonic()
        while time.monotonic() - start < 10.0:
            conn.touch(msg.id)
            gevent.sleep(0.5)
        assert frames == [], f"unexpected frames while touching: {frames}"
        conn.finish(msg.id)

        def finished():
            c = find_channel(http.stats(topic=topic), topic, "ch")
            if c and c["clients"] and c["clients"][0]["finish_count"] == 1:
                return c
            return None

        chan = wait_for(finished, message="FIN to be counted")
        gevent.sleep(0.3)
        assert frames == [], f"unexpected frames after FIN: {frames}"
    finally:
        conn.close_stream()
        listener.join(timeout=10)
    assert chan["timeout_count"] == 0
    assert chan["in_flight_count"] == 0
    assert chan["depth"] == 0


def test_untouched_message_times_out_and_is_redelivered(nsqd_factory, topic):
    # The counterpart of the TOUCH test: without TOUCH the 2 s timeout does fire.
    nsqd = nsqd_factory("--msg-timeout=2s")
    http = nsqd.http()
    assert http.publish(topic, b"forgotten") == b"OK"

    conn = nsqd.tcp()
    conn.connect()
    conn.identify()
    conn.subscribe(topic, "ch")
    assert conn.read_response() == (nsq.FRAME_TYPE_RESPONSE, b"OK")
    conn.ready(1)
    frame, first = conn.read_response()
    assert frame == nsq.FRAME_TYPE_MESSAGE and first.attempts == 1
    # Do nothing: the message times out and comes back (RDY 1 still applies).
    while True:
        frame, second = conn.read_response()
        if frame == nsq.FRAME_TYPE_MESSAGE:
            break
        assert (frame, second) == (nsq.FRAME_TYPE_RESPONSE, b"_heartbeat_")
    assert second.id == first.id
    assert second.body == b"forgotten"
    assert second.attempts == 2
    conn.finish(second.id)
    chan = wait_for(
        lambda: (lambda c: c if c and c["in_flight_count"] == 0 else None)(
            find_channel(http.stats(topic=topic), topic, "ch")
        ),
        message="FIN to land",
    )
    conn.close_stream()
    assert chan["timeout_count"] == 1
