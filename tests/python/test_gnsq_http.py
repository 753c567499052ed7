"""The nsqd HTTP API through gnsq.NsqdHTTPClient."""

import gnsq
import pytest
from gnsq import protocol as nsq

from conftest import find_channel, find_topic, wait_for


def channel_stats(http, topic, channel):
    return find_channel(http.stats(topic=topic), topic, channel)


def test_ping_and_info(nsqd):
    http = nsqd.http()
    assert http.ping() == b"OK"
    info = http.info()
    assert info["version"] == "1.3.0"
    assert info["tcp_port"] == nsqd.tcp_port
    assert info["http_port"] == nsqd.http_port
    assert isinstance(info["start_time"], int) and info["start_time"] > 0
    assert list(info) == [
        "version",
        "broadcast_address",
        "hostname",
        "http_port",
        "tcp_port",
        "start_time",
        "max_heartbeat_interval",
        "max_output_buffer_size",
        "max_output_buffer_timeout",
        "max_deflate_level",
        "draining",  # drain mode (nsqd::drain), not in the reference
    ]
    assert info["draining"] is False
    assert info["max_heartbeat_interval"] == 60 * 10**9
    assert info["max_output_buffer_size"] == 65536
    assert info["max_output_buffer_timeout"] == 30 * 10**9
    assert info["max_deflate_level"] == 6


def test_stats_shape_on_empty_daemon(nsqd):
    stats = nsqd.http().stats()
    assert stats["version"] == "1.3.0"
    assert stats["health"] == "OK"
    assert stats["topics"] == []
    assert stats["producers"] is None
    assert "memory" in stats
    text = nsqd.http().stats(text=True)
    assert isinstance(text, bytes) and b"nsqd v1.3.0" in text


def test_publish_multipublish_and_topic_channel_admin(nsqd, topic):
    http = nsqd.http()

    assert http.create_topic(topic) == b""
    assert http.create_channel(topic, "ch") == b""
    t = find_topic(http.stats(topic=topic), topic)
    assert t is not None
    assert [c["channel_name"] for c in t["channels"]] == ["ch"]

    assert http.publish(topic, b"one") == b"OK"
    assert http.multipublish(topic, [b"two", b"three", b"four"]) == b"OK"
    assert http.multipublish(topic, [b"bin\n1", b"bin\x002"], binary=True) == b"OK"
    assert http.publish(topic, b"later", defer=60000) == b"OK"

    chan = wait_for(
        lambda: (lambda c: c if c and c["depth"] == 6 and c["deferred_count"] == 1 else None)(
            channel_stats(http, topic, "ch")
        ),
        message="6 queued + 1 deferred messages on the channel",
    )
    assert chan["message_count"] == 7
    t = find_topic(http.stats(topic=topic), topic)
    assert t["message_count"] == 7
    assert t["message_bytes"] == sum(
        len(b) for b in (b"one", b"two", b"three", b"four", b"bin\n1", b"bin\x002", b"later")
    )

    # pause / unpause topic
    assert http.pause_topic(topic) == b""
    assert find_topic(http.stats(topic=topic), topic)["paused"] is True
    assert http.unpause_topic(topic) == b""
    assert find_topic(http.stats(topic=topic), topic)["paused"] is False

    # pause / unpause channel
    assert http.pause_channel(topic, "ch") == b""
    assert channel_stats(http, topic, "ch")["paused"] is True
    assert http.unpause_channel(topic, "ch") == b""
    assert channel_stats(http, topic, "ch")["paused"] is False

    # empty channel drops queued and deferred messages
    assert http.empty_channel(topic, "ch") == b""
    chan = channel_stats(http, topic, "ch")
    assert chan["depth"] == 0
    assert chan["deferred_count"] == 0

    # empty topic (its own queue; no channels -> messages stay at the topic)
    assert http.delete_channel(topic, "ch") == b""
    assert find_topic(http.stats(topic=topic), topic)["channels"] == []
    assert http.publish(topic, b"stays at topic") == b"OK"
    assert find_topic(http.stats(topic=topic), topic)["depth"] == 1
    assert http.empty_topic(topic) == b""
    assert find_topic(http.stats(topic=topic), topic)["depth"] == 0

    assert http.delete_topic(topic) == b""
    assert find_topic(http.stats(), topic) is None


def test_http_errors(nsqd, topic):
    http = nsqd.http()
    # gnsq maps a non-200 JSON answer to NSQHttpError("<status_txt or 'http error'> <code>")
    with pytest.raises(gnsq.errors.NSQHttpError, match="404"):
        http.delete_topic(topic)
    with pytest.raises(gnsq.errors.NSQHttpError, match="404"):
        http.create_channel(topic, "ch")  # channel endpoints never create topics
    http.create_topic(topic)
    with pytest.raises(gnsq.errors.NSQHttpError, match="404"):
        http.delete_channel(topic, "nope")
    with pytest.raises(gnsq.errors.NSQHttpError, match="400"):
        http.publish(topic, b"")  # MSG_EMPTY
    # gnsq refuses invalid names itself; send one with its low-level request helper.
    with pytest.raises(ValueError):
        http.publish("bad!topic", b"x")
    with pytest.raises(gnsq.errors.NSQHttpError, match="400"):
        http._request("POST", "/pub", fields={"topic": "bad!topic"}, body=b"x")
    assert not nsq.valid_topic_name("bad!topic")


def test_topics_and_channels_survive_restart(nsqd_factory, topic):
    first = nsqd_factory()
    http = first.http()
    http.create_topic(topic)
    http.create_channel(topic, "keep")
    http.pause_channel(topic, "keep")
    assert http.publish(topic, b"persisted") == b"OK"
    wait_for(
        lambda: (channel_stats(http, topic, "keep") or {}).get("depth") == 1,
        message="message to reach the channel",
    )
    assert first.stop() == 0, f"nsqd did not exit cleanly on SIGTERM:\n{first.log()}"
    assert (first.data_path / "nsqd.dat").exists()

    second = nsqd_factory(data_path=first.data_path)
    http = second.http()
    chan = channel_stats(http, topic, "keep")
    assert chan is not None, http.stats()
    assert chan["paused"] is True
    assert chan["depth"] == 1
