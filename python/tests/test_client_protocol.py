"""The replicator protocol as its clients speak it since 2026, against real
agents, with the clients' own sequences (replicator_clients.py): a backup a
client requests (Orbax 0.12.10's _BACKUP_REQUESTED), step 0 as a step
(Orbax with replicator v0.5), more data-parallel replicas on restore than
saved (the replicator's growth elasticity), the error files where and when
the clients read them, and saves as fast as continuous checkpointing makes
them. docs/agent-protocol.md, "Rules by client version", states each rule.
"""

import ctypes
import json
import os
import re
import select
import struct
import subprocess
import threading
import time

import pytest

from conftest import STRATA_BIN, on_every_node
from replicator_clients import (BACKUP_REQUESTED_FILE, ERRORS_FILE, FAILED_FILE,
                                PRERESTORE_FILE, LegacyMaxTextClient, OrbaxClient, step_bytes)

IN_CREATE, IN_DELETE, IN_MOVED_FROM, IN_MOVED_TO = 0x100, 0x200, 0x40, 0x80


class OrderedWatch:
    """Names created or moved in, and deleted or moved out, in one directory,
    in the order the kernel saw them (inotify keeps the order of the calls).
    A name moved out is gone as a deleted one is: the agent takes a yaml
    away by renaming it aside first."""

    def __init__(self, path):
        self.libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        wd = self.libc.inotify_add_watch(self.fd, str(path).encode(),
                                         IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO)
        assert wd >= 0, os.strerror(ctypes.get_errno())
        self.events = []  # ("create" | "gone", name)

    def read(self):
        while select.select([self.fd], [], [], 0)[0]:
            buf = os.read(self.fd, 1 << 16)
            at = 0
            while at < len(buf):
                _, mask, _, size = struct.unpack_from("iIII", buf, at)
                name = buf[at + 16:at + 16 + size].rstrip(b"\0").decode(errors="replace")
                at += 16 + size
                gone = mask & (IN_DELETE | IN_MOVED_FROM)
                self.events.append(("gone" if gone else "create", name))
        return self.events

    def close(self):
        os.close(self.fd)


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def replicated_steps(nodes, job: str, node: int):
    """The steps of `node` that some other node took in as a replica."""
    steps = set()
    for other in range(len(nodes.procs)):
        if other != node and nodes.procs[other] is not None:
            steps |= {int(s) for s in re.findall(rf"holding replica {re.escape(job)}/{node}/(\d+) ",
                                                 nodes.log(other))}
    return steps


def backups_ls(url: str):
    out = subprocess.run([STRATA_BIN, "backups", "ls", url, "--json"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def orbax(nodes, node: int, job: str, n: int, slices: int, **kw) -> OrbaxClient:
    return OrbaxClient(nodes.dir(node), job, n, num_slices=slices, **kw)


# Orbax 0.12.10: save(..., backup=True) writes _BACKUP_REQUESTED into the
# step; one rank's request is the step's. The backup lands although the
# cadence (every 1000 steps) asks for none, says it was requested, and holds
# no _BACKUP_REQUESTED (the file is a message, not checkpoint content).
def test_a_requested_backup_lands_out_of_schedule(agents, scratch):
    backup = scratch / "backup"
    backup.mkdir()
    url = f"file://{backup}"
    nodes = agents(2, args=["--node-rank", "{node}", "--backup", url])
    job = "asked"

    def run(node):
        c = orbax(nodes, node, job, 2, 2, backup_interval_steps=1000)
        assert c.initialize() is None
        for step in (10, 20, 30):  # only rank 1 asks, for step 20
            c.save(step, step_bytes(job, 0, step), backup=node == 1 and step == 20)
    on_every_node(2, run)
    wait_for(lambda: re.search(rf"job {job}: backup \S+ of step 20 committed \(.*requested by the "
                               r"client\)", nodes.log(0)), 60, "the requested backup")
    listed = backups_ls(url)
    assert [(b["step"], b["complete"], b["requested"]) for b in listed] == [(20, True, True)]
    assert not list(backup.rglob(BACKUP_REQUESTED_FILE))
    digests = [re.search(r"ingested step 20 \(\d+ bytes, digest (\w+)\)", nodes.log(n)).group(1)
               for n in range(2)]
    assert digests[0] == digests[1], "the replicas differ: the request was taken for content"
    pruned = subprocess.run([STRATA_BIN, "prune", url, "--hourly", "1", "--json"],
                            capture_output=True, text=True, timeout=60)
    assert json.loads(pruned.stdout)["backups"][0]["keep"], pruned.stdout


# Step 0 is saved and restored like any other step; a fresh start is an
# empty regular step-0 marker and "{}" in replicator.prerestore, a restore of
# step 0 a step-0 symlink and "restore-step: 0". The legacy MaxText client
# takes any step-0 marker for a fresh start (its own rule), as before.
def test_step_zero_is_a_step_and_a_fresh_start_is_not_step_zero(agents):
    nodes = agents(2, args=["--node-rank", "{node}"])

    def start(job, node, steps=()):
        c = orbax(nodes, node, job, 2, 1)
        restored = c.initialize()
        prerestore = (nodes.dir(node) / PRERESTORE_FILE).read_text()
        data = c.read(restored) if restored is not None else None
        for step in steps:
            c.save(step, step_bytes(job, node, step))
        return restored, data, prerestore

    for restored, data, prerestore in on_every_node(2, lambda n: start("zero", n, [0])):
        assert (restored, data, prerestore) == (None, None, "{}\n")
    wait_for(lambda: all("ingested step 0 " in nodes.log(n) for n in range(2)), 30, "step 0")
    for n, got in enumerate(on_every_node(2, lambda n: start("zero", n))):
        assert got == (0, step_bytes("zero", n, 0), "restore-step: 0\n"), n

    def legacy(node):
        step = LegacyMaxTextClient(nodes.dir(node), "zero", 2, num_slices=1).initialize()
        return step, [p.is_symlink() for p in nodes.dir(node).glob("*.restore")]
    assert on_every_node(2, legacy) == [(0, [True])] * 2, "legacy MaxText leaves step 0's link"
    for got in on_every_node(2, lambda n: start("fresh", n)):  # another job: nothing of its own
        assert got == (None, None, "{}\n")


def grow_run(nodes, job, node, n, slices, steps, content):
    c = orbax(nodes, node, job, n, slices)
    restored = c.initialize()
    data = c.read(restored) if restored is not None else None
    for step in steps:
        c.save(step, content(node, step))
    return restored, data


# Saved by 2 data-parallel replicas of one node, restored by 4: the new
# replicas get the column's content, byte for byte; back to 2 replicas, the
# job restores as before.
def test_more_replicas_on_restore_take_their_columns_content(agents):
    nodes = agents(4, args=["--node-rank", "{node}"], running=2)
    job = "grow"
    same = lambda node, step: step_bytes(job, 0, step)  # noqa: E731 - replicas are identical
    on_every_node(2, lambda n: grow_run(nodes, job, n, 2, 2, [10, 20], same))
    wait_for(lambda: {20} <= replicated_steps(nodes, job, 0) and
             {20} <= replicated_steps(nodes, job, 1), 60, "step 20 on both replicas")
    nodes.start(2)
    nodes.start(3)
    for n, got in enumerate(on_every_node(4, lambda n: grow_run(nodes, job, n, 4, 4, [30], same))):
        assert got == (20, step_bytes(job, 0, 20)), n
    for n in (2, 3):
        assert re.search(rf"restored {job}/[01]/20 from node [01]", nodes.log(n)), nodes.log(n)[-2000:]
    wait_for(lambda: all({30} <= replicated_steps(nodes, job, n) for n in range(4)), 60, "step 30")
    for n, got in enumerate(on_every_node(2, lambda n: grow_run(nodes, job, n, 2, 2, [], same))):
        assert got == (30, step_bytes(job, 0, 30)), n


# Replicas whose copies of the step differ: the new replicas cannot be given
# the column's content, and every node's client hears why (step, column,
# ranks) instead of restoring an older step or starting fresh.
def test_a_conflicting_column_is_refused(agents):
    nodes = agents(4, args=["--node-rank", "{node}"], running=2)
    job = "split"
    own = lambda node, step: step_bytes(job, node, step)  # noqa: E731 - the replicas differ
    on_every_node(2, lambda n: grow_run(nodes, job, n, 2, 2, [10], own))
    wait_for(lambda: {10} <= replicated_steps(nodes, job, 0) and
             {10} <= replicated_steps(nodes, job, 1), 60, "step 10 on both replicas")
    nodes.start(2)
    nodes.start(3)

    def refused(node):
        with pytest.raises(RuntimeError) as e:
            grow_run(nodes, job, node, 4, 4, [], own)
        return str(e.value)
    for message in on_every_node(4, refused):
        assert ("Replicator fatal errors: job split: step 10: column 0 holds conflicting content ("
                in message), message
        assert re.search(r"rank 0 digest \w{16}", message) and re.search(r"rank 1 digest \w{16}",
                                                                         message), message
        assert "so rank 2, which has no copy of its own, cannot be given it" in message, message


def write_yaml(directory, text: str) -> None:
    """As Orbax writes it: a temporary name renamed into place."""
    (directory / "replicator.yaml.tmp").write_text(text)
    os.replace(directory / "replicator.yaml.tmp", directory / "replicator.yaml")


def wait_yaml_gone(directory, timeout: float = 60) -> None:
    wait_for(lambda: not (directory / "replicator.yaml").exists(), timeout, "the yaml to go")


def before_the_yaml_went(watch: OrderedWatch, since: int, name: str) -> bool:
    """Whether `name` was made (or moved in) after event `since` and before
    the yaml was removed."""
    events = watch.read()[since:]
    gone = events.index(("gone", "replicator.yaml"))
    return ("create", name) in events[:gone]


# Clients read replicator.errors and .failed as soon as the yaml is gone
# (Orbax, the NeMo plugin, MaxText 0.2.5): what the agent finds at the start
# is there before it removes the yaml, and an earlier start's lines are not.
def test_the_error_files_are_there_when_the_yaml_goes(agents):
    nodes = agents(1, args=["--node-rank", "{node}"])
    d = nodes.dir(0)
    for stale in (ERRORS_FILE, FAILED_FILE):
        (d / stale).write_text("an earlier start's line\n")
    watch = OrderedWatch(d)
    try:
        mark = len(watch.read())
        write_yaml(d, "job-name: bad\nframework: orbax\nnode-rank: 3\nnodes: 2")  # a refused yaml
        wait_yaml_gone(d)
        assert before_the_yaml_went(watch, mark, FAILED_FILE), watch.events[mark:]
        failed = (d / FAILED_FILE).read_text()
        assert "node-rank" in failed and "earlier start" not in failed, failed
        assert "earlier start" not in (d / ERRORS_FILE).read_text()

        (d / ERRORS_FILE).write_text("an earlier start's line\n")
        mark = len(watch.read())
        write_yaml(d, "job-name: noted\nframework: orbax\nnode-rank: 0\nnodes: 1\n"
                      "colour: blue")  # accepted, with a key the agent does not know
        wait_yaml_gone(d)
        assert before_the_yaml_went(watch, mark, ERRORS_FILE), watch.events[mark:]
        assert (d / ERRORS_FILE).read_text() == 'replicator.yaml: ignoring unknown key "colour"\n'
        assert not (d / FAILED_FILE).exists()
    finally:
        watch.close()


# An agent that cannot reach any coordinator (no --coordinator, none in the
# yaml, not rank 0): Orbax hears it at its first check, right after the yaml
# goes, instead of waiting 300 s for a marker.
def test_a_start_without_a_coordinator_fails_before_the_client_waits(agents):
    nodes = agents(1, running=0, args=["--node-rank", "1"])
    nodes.coordinator = False
    nodes.start(0)
    watch = OrderedWatch(nodes.dir(0))
    try:
        mark = len(watch.read())
        with pytest.raises(RuntimeError, match="Replicator fatal errors: .*no coordinator"):
            orbax(nodes, 0, "alone", 2, 1).initialize(timeout=60)
        assert before_the_yaml_went(watch, mark, FAILED_FILE), watch.events[mark:]
    finally:
        watch.close()


# Continuous checkpointing: a save at every step, as fast as the client
# writes them. The agents send each node's newest step, back up the one
# asked for, skip steps in between (every step is sent or counted in
# strata_skipped_steps_total{tier="peer"}), keep the replication queue
# bounded, and hold only a few steps once the newest is replicated.
def test_a_burst_of_saves_keeps_the_newest_replicated_and_the_memory_bounded(agents, scratch):
    backup = scratch / "backup"
    backup.mkdir()
    nodes = agents(2, args=["--node-rank", "{node}", "--backup", f"file://{backup}",
                            "--metrics", "127.0.0.1:{metrics}"])
    job, last, asked = "burst", 150, 75
    clients = [orbax(nodes, n, job, 2, 2, backup_interval_steps=100000) for n in range(2)]
    on_every_node(2, lambda n: clients[n].initialize())
    queued, saving = [], threading.Event()
    saving.set()

    def sample():
        while saving.is_set():
            queued.extend(nodes.status(n)["queued"] for n in range(2))
    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        def burst(node):
            for step in range(1, last + 1):
                clients[node].save(step, step_bytes(job, 0, step, size=256 << 10),
                                   backup=step == asked)
        on_every_node(2, burst)
    finally:
        saving.clear()
        sampler.join()
    wait_for(lambda: re.search(rf"backup \S+ of step {asked} committed", nodes.log(0)), 60,
             "the requested backup")

    def accounted(n):  # never more than `last`: no step is counted twice
        sent = replicated_steps(nodes, job, n)
        return last in sent and len(sent) + nodes.metric(
            n, 'strata_skipped_steps_total{tier="peer"}') == last
    for n in range(2):
        wait_for(lambda: accounted(n), 120, f"node {n}'s every step sent or skipped, the newest sent")
    assert queued and max(queued) <= 16 + 1, max(queued)  # Replication::kMaxQueued + the asked one
    for n in range(2):
        wait_for(lambda: len([s for s in nodes.status(n)["steps"] if s["job"] == job]) <= 2, 60,
                 f"node {n}'s store back to its newest step and its peer's")
