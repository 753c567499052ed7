"""The official Python client, pynsq (tornado), against our nsqd.

pynsq sends extra IDENTIFY keys (short_id, long_id) that nsqd must ignore, and relies on
the feature-negotiation response, heartbeats and RDY handling like any other client.
"""

import asyncio
import collections

import nsq

from conftest import find_channel

TIMEOUT = 120.0


async def until(predicate, what, timeout=TIMEOUT):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


def run(coro):
    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(coro)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def test_pynsq_writer_and_reader_roundtrip(nsqd, topic):
    expected = [f"w-{i}".encode() for i in range(100)] + [f"m-{i}".encode() for i in range(100)]
    received = collections.Counter()
    results = []

    async def scenario():
        writer = nsq.Writer([nsqd.tcp_address])
        reader = None
        try:
            await until(
                lambda: any(c.connected() for c in writer.conns.values()), "writer to connect"
            )
            for body in expected[:100]:
                writer.pub(topic, body, callback=lambda conn, data: results.append(data))
            writer.mpub(topic, expected[100:], callback=lambda conn, data: results.append(data))
            await until(lambda: len(results) == 101, "101 publish responses")

            def handler(message):
                received[message.body] += 1
                return True  # FIN

            reader = nsq.Reader(
                topic=topic,
                channel="py",
                message_handler=handler,
                nsqd_tcp_addresses=[nsqd.tcp_address],
                max_in_flight=50,
            )
            await until(lambda: sum(received.values()) >= len(expected), "all messages")

            def drained():
                c = find_channel(nsqd.http().stats(topic=topic), topic, "py")
                return c is not None and c["in_flight_count"] == 0 and c["depth"] == 0

            await until(drained, "the channel to drain")
            await asyncio.sleep(0.3)  # room for a stray duplicate to arrive
        finally:
            if reader is not None:
                reader.close()
            for conn in list(writer.conns.values()):
                conn.close()
            await asyncio.sleep(0.1)

    run(scenario())

    assert results == [b"OK"] * 101
    assert set(received) == set(expected)
    assert all(n == 1 for n in received.values()), [b for b, n in received.items() if n != 1]
