"""Fixtures for the black-box Python client tests.

Each test gets its own nsqd process (our Rust binary) listening on ephemeral loopback
ports with a fresh data directory. The binary is taken from $NSQD_BIN, else
target/release/nsqd, else target/debug/nsqd (relative to the repository root).
"""

import os
import queue
import re
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import gevent
import gnsq
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
LISTEN_RE = re.compile(r"\b(TCP|HTTP): listening on (\S+)")

# Generous: CI is a loaded 2-core machine.
STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


def nsqd_binary():
    env = os.environ.get("NSQD_BIN")
    if env:
        return Path(env)
    for profile in ("release", "debug"):
        candidate = REPO_ROOT / "target" / profile / "nsqd"
        if candidate.exists():
            return candidate
    return None


def split_addr(addr):
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


class NsqdProcess:
    """A running nsqd: addresses, log lines, and helpers to build gnsq clients."""

    def __init__(self, binary, data_path, extra_args=()):
        self.binary = binary
        self.data_path = Path(data_path)
        self.args = [
            str(binary),
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            f"--data-path={self.data_path}",
            *extra_args,
        ]
        self.lines = []
        self._events = queue.Queue()
        self.proc = None
        self._reader = None
        self.tcp_host = self.tcp_port = self.http_host = self.http_port = None

    # -- lifecycle ---------------------------------------------------------------------
    def start(self):
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

        found = {}
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while len(found) < 2:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise RuntimeError(
                    f"nsqd did not report both listeners within {STARTUP_TIMEOUT}s; "
                    f"log:\n{self.log()}"
                )
            try:
                kind, value = self._events.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if kind == "eof":
                code = self.proc.wait(timeout=STOP_TIMEOUT)
                raise RuntimeError(f"nsqd exited early with status {code}; log:\n{self.log()}")
            found[kind] = value
        self.tcp_host, self.tcp_port = split_addr(found["TCP"])
        self.http_host, self.http_port = split_addr(found["HTTP"])
        return self

    def _drain(self):
        for raw in iter(self.proc.stderr.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            m = LISTEN_RE.search(line)
            if m:
                self._events.put((m.group(1), m.group(2)))
        self._events.put(("eof", None))

    def stop(self, sig=signal.SIGTERM):
        """Signal nsqd, wait for it to exit (kill after STOP_TIMEOUT); return its exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT)
        if self._reader is not None:
            self._reader.join(timeout=STOP_TIMEOUT)
        return self.proc.returncode

    def log(self, last=80):
        return "\n".join(self.lines[-last:])

    # -- addresses and clients ---------------------------------------------------------
    @property
    def tcp_address(self):
        return f"{self.tcp_host}:{self.tcp_port}"

    def http(self):
        return gnsq.NsqdHTTPClient(self.http_host, self.http_port, timeout=30.0)

    def tcp(self, **kwargs):
        kwargs.setdefault("timeout", 30.0)
        return gnsq.NsqdTCPClient(self.tcp_host, self.tcp_port, **kwargs)


@pytest.fixture
def nsqd_factory(tmp_path):
    """Start nsqd processes (optionally with extra flags); all are stopped at teardown."""
    binary = nsqd_binary()
    if binary is None or not binary.exists():
        pytest.fail(
            "nsqd binary not found: set NSQD_BIN or run `cargo build --release -p nsqd-bin`"
        )
    started = []

    def start(*extra_args, data_path=None):
        if data_path is None:
            data_path = tmp_path / f"data-{len(started)}"
            data_path.mkdir()
        proc = NsqdProcess(binary, data_path, extra_args)
        started.append(proc)
        return proc.start()

    yield start

    for proc in started:
        proc.stop()
        # Shown by pytest only when the test failed.
        print(f"--- nsqd {proc.args[1:]} (exit {proc.proc.returncode}) last log lines ---")
        print(proc.log())


@pytest.fixture
def nsqd(nsqd_factory):
    return nsqd_factory()


@pytest.fixture
def topic():
    """A fresh, valid topic name per test."""
    return "t_" + uuid.uuid4().hex[:12]


def wait_for(predicate, timeout=60.0, interval=0.05, message="condition"):
    """Poll `predicate` (yielding to gevent between polls) until it is truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        gevent.sleep(interval)


def find_topic(stats, name):
    for t in stats.get("topics") or []:
        if t["topic_name"] == name:
            return t
    return None


def find_channel(stats, topic_name, channel_name):
    t = find_topic(stats, topic_name)
    if t is None:
        return None
    for c in t["channels"]:
        if c["channel_name"] == channel_name:
            return c
    return None
