"""Client-visible details that gnsq applications and tools rely on: /stats client entries,
heartbeats, CLS, deferred publish, ephemeral channels, body-size errors."""

import gevent
import gevent.event
import gnsq
import pytest
from gnsq import protocol as nsq
from gnsq.nsqd import HOSTNAME, SHORTNAME

from conftest import find_channel, find_topic, wait_for


def test_stats_show_gnsq_consumer_and_producer(nsqd, topic):
    producer = gnsq.Producer(nsqd_tcp_addresses=[nsqd.tcp_address])
    producer.start()
    got = gevent.event.Event()
    consumer = gnsq.Consumer(
        topic,
        "ch",
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=7,
        message_handler=lambda c, message: got.set(),
    )
    try:
        assert producer.publish(topic, b"x") == b"OK"
        assert producer.multipublish(topic, [b"y", b"z"]) == b"OK"
        consumer.start(block=False)
        assert got.wait(timeout=60)
        http = nsqd.http()

        def consumer_entry():
            chan = find_channel(http.stats(topic=topic), topic, "ch")
            if chan and len(chan["clients"]) == 1:
                c = chan["clients"][0]
                # gnsq starts a connection at RDY 1 and raises it to max_in_flight after
                # the first FIN, from a background greenlet: wait for that RDY too.
                if c["finish_count"] == 3 and c["ready_count"] == 7:
                    return c
            return None

        client = wait_for(consumer_entry, message="3 FINs and RDY 7 from the consumer")
        stats = http.stats(topic=topic)
    finally:
        consumer.close()
        consumer.join(timeout=30)
        producer.close()
        producer.join(timeout=30)

    assert client["client_id"] == SHORTNAME
    assert client["hostname"] == HOSTNAME
    assert client["user_agent"] == f"gnsq/{gnsq.__version__}"
    assert client["version"] == "V2"
    assert client["state"] == 3
    assert client["ready_count"] == 7
    assert client["message_count"] == 3
    assert client["in_flight_count"] == 0
    assert client["remote_address"].startswith("127.0.0.1:")

    producers = stats["producers"]
    assert isinstance(producers, list) and len(producers) == 1
    prod = producers[0]
    assert prod["user_agent"] == f"gnsq/{gnsq.__version__}"
    assert prod["pub_counts"] == [{"topic": topic, "count": 3}]


def test_heartbeats_are_sent_and_answered(nsqd):
    conn = nsqd.tcp(heartbeat_interval=1)  # gnsq takes seconds, sends 1000 ms
    conn.connect()
    conn.identify()
    heartbeats = 0
    try:
        # gnsq answers each _heartbeat_ with NOP inside read_response().
        for _ in range(3):
            frame, data = conn.read_response()
            assert (frame, data) == (nsq.FRAME_TYPE_RESPONSE, b"_heartbeat_")
            heartbeats += 1
        assert conn.is_connected
    finally:
        conn.close_stream()
    assert heartbeats == 3


def test_cls_answers_close_wait(nsqd, topic):
    nsqd.http().create_topic(topic)
    conn = nsqd.tcp()
    conn.connect()
    conn.identify()
    conn.subscribe(topic, "ch")
    assert conn.read_response() == (nsq.FRAME_TYPE_RESPONSE, b"OK")
    conn.close()  # gnsq's close() sends CLS
    assert conn.read_response() == (nsq.FRAME_TYPE_RESPONSE, b"CLOSE_WAIT")
    conn.close_stream()


def test_producer_deferred_publish(nsqd, topic):
    http = nsqd.http()
    http.create_topic(topic)
    http.create_channel(topic, "ch")
    producer = gnsq.Producer(nsqd_tcp_addresses=[nsqd.tcp_address])
    producer.start()
    try:
        assert producer.publish(topic, b"later", defer=60000) == b"OK"  # DPUB
    finally:
        producer.close()
        producer.join(timeout=30)
    chan = wait_for(
        lambda: (lambda c: c if c and c["deferred_count"] == 1 else None)(
            find_channel(http.stats(topic=topic), topic, "ch")
        ),
        message="the DPUB message to be deferred on the channel",
    )
    assert chan["depth"] == 0
    assert chan["message_count"] == 1


def test_ephemeral_channel_goes_away_with_its_last_consumer(nsqd, topic):
    http = nsqd.http()
    http.create_topic(topic)
    conn = nsqd.tcp()
    conn.connect()
    conn.identify()
    conn.subscribe(topic, "tmp#ephemeral")
    assert conn.read_response() == (nsq.FRAME_TYPE_RESPONSE, b"OK")
    assert find_channel(http.stats(topic=topic), topic, "tmp#ephemeral") is not None
    conn.close_stream()
    wait_for(
        lambda: find_topic(http.stats(topic=topic), topic)["channels"] == [],
        message="the ephemeral channel to be deleted",
    )


def test_empty_body_is_bad_message(nsqd, topic):
    conn = nsqd.tcp()
    conn.connect()
    conn.identify()
    conn.publish(topic, b"")
    frame, error = conn.read_response()
    assert frame == nsq.FRAME_TYPE_ERROR
    assert isinstance(error, gnsq.errors.NSQBadMessage)
    assert error.args[0] == b"PUB invalid message body size 0"
    assert not conn.is_connected


@pytest.mark.parametrize("count", [1, 2500])
def test_multipublish_batch_sizes(nsqd, topic, count):
    producer = gnsq.Producer(nsqd_tcp_addresses=[nsqd.tcp_address])
    producer.start()
    try:
        bodies = [b"%d" % i for i in range(count)]
        assert producer.multipublish(topic, bodies) == b"OK"
    finally:
        producer.close()
        producer.join(timeout=30)
    t = find_topic(nsqd.http().stats(topic=topic), topic)
    assert t["message_count"] == count
    assert t["depth"] == count
