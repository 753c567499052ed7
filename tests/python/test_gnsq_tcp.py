"""gnsq's low-level TCP connection: IDENTIFY negotiation and error frames."""

import gnsq
import pytest
from gnsq import protocol as nsq

from conftest import find_topic

# TCP spec §9.1.5: keys of the feature-negotiation response, in this order.
IDENTIFY_KEYS = [
    "max_rdy_count",
    "version",
    "max_msg_timeout",
    "msg_timeout",
    "tls_v1",
    "deflate",
    "deflate_level",
    "max_deflate_level",
    "snappy",
    "sample_rate",
    "auth_required",
    "output_buffer_size",
    "output_buffer_timeout",
]


def test_identify_feature_negotiation_response(nsqd):
    conn = nsqd.tcp()
    conn.connect()
    try:
        data = conn.identify()  # gnsq always sends feature_negotiation: true
    finally:
        conn.close_stream()
    assert isinstance(data, dict)
    assert list(data) == IDENTIFY_KEYS
    assert data == {
        "max_rdy_count": 2500,
        "version": "1.3.0",
        "max_msg_timeout": 900000,
        "msg_timeout": 60000,
        "tls_v1": False,
        "deflate": False,
        "deflate_level": 6,
        "max_deflate_level": 6,
        "snappy": False,
        "sample_rate": 0,
        "auth_required": False,
        "output_buffer_size": 16384,
        "output_buffer_timeout": 250,
    }
    assert conn.max_ready_count == 2500


def test_identify_reflects_server_flags(nsqd_factory):
    nsqd = nsqd_factory("--max-rdy-count=100", "--msg-timeout=30s")
    conn = nsqd.tcp(output_buffer_size=4096, output_buffer_timeout=100, sample_rate=50)
    conn.connect()
    try:
        data = conn.identify()
    finally:
        conn.close_stream()
    assert data["max_rdy_count"] == 100
    assert data["msg_timeout"] == 30000
    assert data["output_buffer_size"] == 4096
    assert data["output_buffer_timeout"] == 100
    assert data["sample_rate"] == 50


def test_deprecated_nsqd_class_identify_and_publish(nsqd, topic):
    # gnsq.Nsqd is the pre-1.0 combined TCP+HTTP connection object, still shipped by gnsq.
    with pytest.warns(DeprecationWarning):
        conn = gnsq.Nsqd(address=nsqd.tcp_host, tcp_port=nsqd.tcp_port, http_port=nsqd.http_port)
    conn.connect()
    try:
        data = conn.identify()
        assert list(data) == IDENTIFY_KEYS
        conn.publish(topic, b"via tcp")  # goes over TCP while connected
        assert conn.read_response() == (nsq.FRAME_TYPE_RESPONSE, b"OK")
        conn.multipublish(topic, [b"a", b"b"])
        assert conn.read_response() == (nsq.FRAME_TYPE_RESPONSE, b"OK")
    finally:
        conn.close_stream()
    t = find_topic(conn.stats(topic=topic), topic)  # HTTP half of the object
    assert t["message_count"] == 3


def test_pub_invalid_topic_raises_bad_topic_and_closes(nsqd):
    conn = nsqd.tcp()
    conn.connect()
    conn.identify()
    # gnsq validates names client-side; build the command by hand to reach the server.
    conn.send(nsq._command(nsq.PUB, b"body", "bad!topic"))
    frame, error = conn.read_response()
    assert frame == nsq.FRAME_TYPE_ERROR
    assert isinstance(error, gnsq.errors.NSQBadTopic)
    assert error.args[0] == b'PUB topic name "bad!topic" is not valid'
    assert error.fatal
    assert not conn.is_connected  # gnsq closes on fatal errors


def test_mpub_invalid_topic_error_text(nsqd):
    conn = nsqd.tcp()
    conn.connect()
    conn.identify()
    conn.send(nsq._command(nsq.MPUB, nsq.multipublish_body([b"x"]), "bad!topic"))
    frame, error = conn.read_response()
    conn.close_stream()
    assert frame == nsq.FRAME_TYPE_ERROR
    assert isinstance(error, gnsq.errors.NSQBadTopic)
    # The reference repeats the code inside the text for MPUB (TCP spec Appendix A).
    assert error.args[0] == b'E_BAD_TOPIC MPUB topic name "bad!topic" is not valid'


def test_sub_invalid_channel_raises_bad_channel(nsqd, topic):
    conn = nsqd.tcp()
    conn.connect()
    conn.identify()
    conn.send(nsq._command(nsq.SUB, None, topic, "bad!chan"))
    frame, error = conn.read_response()
    conn.close_stream()
    assert frame == nsq.FRAME_TYPE_ERROR
    assert isinstance(error, gnsq.errors.NSQBadChannel)
    assert error.args[0] == b'SUB channel name "bad!chan" is not valid'


def test_producer_publish_to_invalid_topic_raises_nsq_bad_topic(nsqd, monkeypatch):
    producer = gnsq.Producer(nsqd_tcp_addresses=[nsqd.tcp_address])
    producer.start()
    try:
        # Without this, gnsq raises ValueError before sending anything.
        with pytest.raises(ValueError):
            producer.publish("bad!topic", b"x")
    finally:
        producer.close()
        producer.join(timeout=30)

    # Let the invalid name through gnsq's client-side check so the server judges it.
    monkeypatch.setattr(nsq, "assert_valid_topic_name", lambda name: None)
    producer = gnsq.Producer(nsqd_tcp_addresses=[nsqd.tcp_address])
    producer.start()
    try:
        with pytest.raises(gnsq.errors.NSQBadTopic, match="is not valid"):
            producer.publish("bad!topic", b"x")
    finally:
        producer.close()
        producer.join(timeout=30)


def test_fin_unknown_id_is_non_fatal(nsqd, topic):
    nsqd.http().create_topic(topic)
    conn = nsqd.tcp()
    conn.connect()
    conn.identify()
    conn.subscribe(topic, "ch")
    assert conn.read_response() == (nsq.FRAME_TYPE_RESPONSE, b"OK")
    conn.send(nsq._command(nsq.FIN, None, b"0123456789abcdef"))
    frame, error = conn.read_response()
    assert frame == nsq.FRAME_TYPE_ERROR
    assert isinstance(error, gnsq.errors.NSQFinishFailed)
    assert not error.fatal
    assert error.args[0] == b"FIN 0123456789abcdef failed ID not in flight"
    assert conn.is_connected
    # The connection still works: a message published now is delivered to it.
    nsqd.http().publish(topic, b"after error")
    conn.ready(1)
    frame, msg = conn.read_response()
    assert frame == nsq.FRAME_TYPE_MESSAGE
    assert msg.body == b"after error"
    conn.finish(msg.id)
    conn.close_stream()
