"""Loopback ports for the tests' agents, S3 servers and proxies.

Ports are picked below Linux's ephemeral range (32768 and up), where no
outgoing connection of a test running beside this one (ctest -j) can take
one between the pick and the bind. The range is split: the C++ suites
(tests/harness/test_util.cc, FreePort) and the suites that hold ctest's lock
strata_cluster with them use 20000-25999, the Python tests (which run beside
those) 26000-31999. Within a process, ports are handed out in turn from a
random start, so no two calls return the same one; a port that does not
bind is skipped.
"""

import random
import socket

CLUSTER = (20000, 26000)
PYTHON = (26000, 32000)

_next = {}  # range -> offset of the next port to hand out


def free_ports(count: int, span=PYTHON) -> list:
    low, high = span
    size = high - low
    ports = []
    for _ in range(size):
        offset = _next.setdefault(span, random.randrange(size))
        _next[span] = (offset + 1) % size
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", low + offset))
            except OSError:
                continue
        ports.append(low + offset)
        if len(ports) == count:
            return ports
    raise AssertionError(f"no {count} free ports in {low}-{high - 1}")


def free_port(span=PYTHON) -> int:
    return free_ports(1, span)[0]
