"""The replicator protocol as the real clients speak it, against 4 real agents.

Each client kind (replicator_clients.py: Orbax, the NeMo plugin, legacy
MaxText) runs a fresh start, a restart restored from the nodes' own RAM and
the loss of a node restored from its peers, and checks the restored bytes.
Throughout, inotify watches every node's directory: the agent may put no
name there that a client would take for its own (anything ending in
.restore, .meta or .data but a final marker of this node, a bare step
number, step=N), not even for a moment.
"""

import ctypes
import os
import re
import select
import shutil
import struct
import threading
import time
from pathlib import Path

import pytest

from conftest import on_every_node
from replicator_clients import (JAX_INIT_INFO_FILE, LegacyMaxTextClient, NemoClient,
                                OrbaxClient, step_bytes)

NODES = 4
SLICES = 2  # data-parallel replicas: node n and n + 2 hold the same bytes

IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_IGNORED = 0x8000


class DirectoryWatch:
    """Every name created in or renamed into the watched directories."""

    def __init__(self):
        self.libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        self.nodes = {}  # watch descriptor -> node
        self.events = []  # (node, name)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def add(self, node: int, path: Path) -> None:
        wd = self.libc.inotify_add_watch(self.fd, str(path).encode(), IN_CREATE | IN_MOVED_TO)
        assert wd >= 0, os.strerror(ctypes.get_errno())
        self.nodes[wd] = node

    def _run(self) -> None:
        while not self.stopped.is_set():
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if not ready:
                continue
            try:
                buf = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                continue
            at = 0
            while at < len(buf):
                wd, mask, _, size = struct.unpack_from("iIII", buf, at)
                name = buf[at + 16:at + 16 + size].rstrip(b"\0").decode(errors="replace")
                at += 16 + size
                if name and not mask & IN_IGNORED and wd in self.nodes:
                    self.events.append((self.nodes[wd], name))

    def stop(self) -> None:
        time.sleep(0.2)  # the last events
        self.stopped.set()
        self.thread.join()
        os.close(self.fd)


def looks_like_clients(name: str) -> bool:
    """Names a real client would take for a marker or a step of its own."""
    return (name.endswith((".restore", ".meta", ".data")) or re.fullmatch(r"\d+", name) is not None
            or re.search(r"step=\d+", name) is not None)


def violations(watch: DirectoryWatch, job: str, created):
    """The names only the agent can have made that a client would match."""
    bad = []
    for node, name in watch.events:
        if not looks_like_clients(name) or name in created[node]:
            continue
        if re.fullmatch(rf"{re.escape(job)}-s\d+-n{node}-w\d+\.restore", name):
            continue  # a final marker, made under its own name
        bad.append((node, name))
    return bad


def wait_replicated(agents, job: str, step: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    for node in range(NODES):
        want = f"holding replica {job}/{node}/{step} "
        while not any(want in agents.log(n) for n in range(NODES)):
            assert time.monotonic() < deadline, f"node {node}'s step {step} was not replicated"
            time.sleep(0.05)


class Kind:
    """One client kind: how it starts, saves and reads."""

    def __init__(self, name):
        self.name = name
        self.job = f"{name}-job"

    def content(self, node: int, step: int) -> bytes:
        # Data-parallel replicas hold the same state (Orbax and MaxText tell
        # the agent so with assume-data-parallelism).
        column = node if self.name == "nemo" else node % (NODES // SLICES)
        return step_bytes(self.job, column, step)

    def client(self, agents, node: int):
        d = agents.dir(node)
        if self.name == "orbax":
            return OrbaxClient(d, self.job, NODES, num_slices=SLICES)
        if self.name == "maxtext":
            return LegacyMaxTextClient(d, self.job, NODES, num_slices=SLICES)
        # The plugin always writes peers-per-node and adds peer-ranks.
        return NemoClient(d, self.job, node, NODES, peer_ranks=[(node + 2) % NODES])

    def start(self, c):
        """The client's start-up; the step it restored, or None."""
        if self.name == "nemo":
            c.init_high_scale_ckpt()
            return c.block_and_proces_restore_dir()
        step = c.initialize()
        return None if step == 0 else step

    def save(self, c, node: int, step: int) -> None:
        if self.name == "nemo":
            assert c.save(step + 1, self.content(node, step)) == step  # step=G -> G-1
        else:
            c.save(step, self.content(node, step))

    def start_and_save(self, c, node: int, steps):
        """Starts `c`, then saves `steps`; the step restored and its bytes."""
        restored = self.start(c)
        data = c.read(restored) if restored is not None else None
        for step in steps:
            self.save(c, node, step)
        return restored, data


@pytest.mark.parametrize("kind", ["orbax", "nemo", "maxtext"])
def test_real_client_fresh_start_restart_and_lost_node(agents, kind):
    k = Kind(kind)
    nodes = agents(NODES, args=["--node-rank", "{node}"])
    watch = DirectoryWatch()
    for n in range(NODES):
        watch.add(n, nodes.dir(n))
    created = [set() for _ in range(NODES)]

    def start_and_save(steps):
        def run(node):
            c = k.client(nodes, node)
            try:
                return k.start_and_save(c, node, steps)
            finally:
                created[node] |= c.created
        return on_every_node(NODES, run)

    # A fresh start: nothing to restore; then two saves.
    for restored, _ in start_and_save([10, 20]):
        assert restored is None
    wait_replicated(nodes, k.job, 20)
    if kind != "nemo":
        for n in range(NODES):
            info = (nodes.dir(n) / JAX_INIT_INFO_FILE).read_text()
            assert info == f"{n}\n127.0.0.1:8476\n", info

    # Every client restarts: each node restores from its own RAM.
    for n, (restored, data) in enumerate(start_and_save([30])):
        assert restored == 20, (n, restored)
        assert data == k.content(n, 20), f"node {n}: restored bytes differ"
        assert nodes.status(n)["last_restore"] == "step 20 from own store", nodes.status(n)
    wait_replicated(nodes, k.job, 30)

    # Node 2 is lost with its RAM; its replacement starts empty.
    nodes.kill(2)
    shutil.rmtree(nodes.dir(2))
    nodes.dir(2).mkdir()
    watch.add(2, nodes.dir(2))
    nodes.start(2)
    for n, (restored, data) in enumerate(start_and_save([])):
        assert restored == 30, (n, restored)
        assert data == k.content(n, 30), f"node {n}: restored bytes differ"
    assert re.search(rf"restored {k.job}/2/30 from ", nodes.log(2)), nodes.log(2)[-3000:]
    assert " from node " in nodes.status(2)["last_restore"], nodes.status(2)
    if kind != "nemo":
        assert (nodes.dir(2) / JAX_INIT_INFO_FILE).read_text() == "2\n127.0.0.1:8476\n"
    if kind == "nemo":
        assert "using peer-ranks (1 peers), ignoring peers-per-node: 1" in nodes.log(0)
    if kind == "maxtext":
        assert "backup-interval-minutes: 0: no cadence from the client" in nodes.log(0)

    watch.stop()
    assert watch.events, "the watch saw nothing"
    bad = violations(watch, k.job, created)
    assert not bad, f"names a client would take for its own, made by the agent: {bad}"


def test_without_inotify_the_agent_rescans_every_second(agents):
    """inotify_init1 fails (as at the host's instance limit): the agent says
    so once and serves the NeMo plugin, whose yaml is written in place."""
    k = Kind("nemo")
    nodes = agents(NODES, env={"STRATA_TEST_NO_INOTIFY": "1"})
    for step_pair in ([10], [20]):
        results = on_every_node(
            NODES, lambda node: k.start_and_save(k.client(nodes, node), node, step_pair))
        if step_pair == [20]:
            for n, (restored, data) in enumerate(results):
                assert restored == 10 and data == k.content(n, 10), (n, restored)
        else:
            assert all(r is None for r, _ in results)
        wait_replicated(nodes, k.job, step_pair[0])
    for n in range(NODES):
        log = nodes.log(n)
        assert log.count("rescanning it every second instead") == 1, log[-2000:]
        assert "inotify_init1: Too many open files" in log


def test_an_orbax_client_without_data_parallelism_writes_one_and_restarts(agents):
    """Orbax writes assume-data-parallelism even when it is 1 (and then has
    no peers: peer-ranks: [])."""
    nodes = agents(2, args=["--node-rank", "{node}"])

    def run(node, steps):
        c = OrbaxClient(nodes.dir(node), "dp1", 2, num_slices=1)
        restored = c.initialize()
        data = c.read(restored) if restored is not None else None
        for step in steps:
            c.save(step, step_bytes("dp1", node, step))
        return restored, data

    def both(steps):
        return on_every_node(2, lambda node: run(node, steps))

    assert both([5]) == [(None, None), (None, None)]
    deadline = time.monotonic() + 30
    while not all("ingested step 5 " in nodes.log(n) for n in range(2)):
        assert time.monotonic() < deadline, [nodes.log(n)[-1000:] for n in range(2)]
        time.sleep(0.05)
    got = both([])
    for n in range(2):
        assert got[n] == (5, step_bytes("dp1", n, 5)), n
