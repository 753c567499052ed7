#!/usr/bin/env python3
"""Run inside a fresh network namespace (`unshare --net`): bring up its loopback interface,
then exec the given command. The namespace has no other interface, so the suite reaches
127.0.0.1 / ::1 only: a test that dials another address (gnsq's test_no_connections dials
192.0.2.1:4150) gets "Network is unreachable" at once and no packet leaves the machine, and
fixed ports (nsqjs uses 4150/4151 + 50*k) cannot collide with anything outside.

usage: unshare --net -- python3 netns_exec.py CMD [ARG...]
"""
import fcntl
import os
import socket
import struct
import sys

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def loopback_up():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, req)[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    loopback_up()
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
