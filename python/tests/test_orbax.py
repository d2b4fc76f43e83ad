"""The real `orbax-checkpoint` and `jax` packages against real agents.

Four JAX processes on CPU (one per simulated node, orbax_worker.py) and four
`strata agent`s on loopback, as a job with Orbax's multi-tier checkpointing
runs on GKE:

* ``multi_tier_checkpointing.initialize_multi_tier_checkpointing`` (the
  multi-controller entry point of GKE's multi-tier checkpointing): it reads
  ``jax-init-info.txt`` that the agent writes (``--node-rank``,
  ``--jax-coordinator``; on GKE the CSI driver's file), calls
  ``jax.distributed.initialize`` with it, writes ``replicator.yaml``
  (``peer-ranks`` the same position in the other slice,
  ``assume-data-parallelism: 2``), and turns the newest ``.restore`` marker
  into ``<step>``;
* ``ReplicatorCheckpointManager``: saves each process's shards into its
  node's local directory, and restores ``latest_step()`` with the shardings of
  a (data, model) = (2, 2) mesh: the arrays are split over ``model`` and
  replicated over ``data``, so nodes n and n + 2 hold the same shards, as
  ``assume-data-parallelism`` tells the agent.

These are the two calls a multi-controller JAX job on GKE makes; the others
are not for a per-node replicator: the Pathways (colocated Python) path
needs a Pathways backend, and ``emergency.checkpoint_manager.CheckpointManager``
does its own in-job replication and persistent saves.

Each scenario checks that every restored shard equals what was saved for
that step (the worker compares them and fails otherwise): a fresh start
with saves; a restart of every process from the nodes' own RAM; one node lost
with its RAM, restored from its peer; and the whole cluster lost, restored
from the file:// backup.
"""

import os
import re
import shutil
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

import pytest

from conftest import _children, free_ports, result_of, wait_or_kill

# Looked up, not imported: only the workers load JAX.
if any(find_spec(m) is None for m in ("jax", "orbax")) or find_spec("orbax.checkpoint") is None:
    pytest.skip("needs the jax and orbax-checkpoint packages (python/requirements.lock)",
                allow_module_level=True)

NODES = 4
JOB = "orbax-job"
WORKER = Path(__file__).with_name("orbax_worker.py")
RUN_TIMEOUT = 180  # seconds for every process of a run to finish

# The JAX processes share the machine (2 cores in CI) with four agents.
WORKER_ENV = {
    "JAX_PLATFORMS": "cpu",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "OMP_NUM_THREADS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "1",
    "ORBAX_WORKER_PROCESSES": str(NODES),
}


class OrbaxJob:
    """The agents of four nodes and the JAX job that runs on them."""

    def __init__(self, agents, root: Path):
        self.root = root
        self.backup = root / "backup"
        self.backup.mkdir()
        self.jax_port = free_ports(1)[0]  # reused by every run's process 0
        self.agents = agents(NODES, args=[
            "--node-rank", "{node}", "--jax-coordinator", f"127.0.0.1:{self.jax_port}",
            "--backup", f"file://{self.backup}"])
        self.runs = 0

    def dir(self, node: int) -> Path:
        return self.agents.dir(node)

    def run(self, save=(), backup_interval_steps: int = 10):
        """Starts the job's four processes, each restoring what its node's
        agent hands over and then saving `save`; their results in node order."""
        self.runs += 1
        env = dict(os.environ, **WORKER_ENV)
        procs, logs = [], []
        for node in range(NODES):
            log = self.root / f"run{self.runs}-node{node}.log"
            logs.append(log)
            with open(log, "w") as out:
                p = subprocess.Popen(
                    [sys.executable, str(WORKER), "--local-dir", str(self.dir(node)),
                     "--job", JOB, "--save", ",".join(map(str, save)),
                     "--backup-interval-steps", str(backup_interval_steps),
                     "--timeout", str(RUN_TIMEOUT)],
                    stdout=out, stderr=subprocess.STDOUT, env=env)
            _children.append(p)
            procs.append(p)
        wait_or_kill(procs, RUN_TIMEOUT)
        results = []
        for node, (p, log) in enumerate(zip(procs, logs)):
            text = log.read_text(errors="replace")
            result = result_of(text)
            assert p.returncode == 0 and result is not None, (
                f"run {self.runs}, node {node}: exit {p.returncode}\n{text[-4000:]}\n"
                f"agent {node}:\n{self.agents.log(node)[-2000:]}")
            results.append(result)
        return results

    def wait_log(self, node: int, pattern: str, timeout: float = 60) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.agents.log(node))
            if m:
                return m
            assert time.monotonic() < deadline, \
                f"agent {node} never logged {pattern!r}:\n{self.agents.log(node)[-3000:]}"
            time.sleep(0.1)

    def wait_replicated(self, step: int) -> None:
        """Until every node's `step` is held by its peer (n + 2 mod 4)."""
        for node in range(NODES):
            peer = (node + 2) % NODES
            self.wait_log(peer, rf"holding replica {re.escape(JOB)}/{node}/{step} ")

    def held(self, holder: int, node: int, step: int) -> Path:
        return self.dir(holder) / ".strata-agent" / "steps" / JOB / str(node) / str(step)


def files(root: Path) -> dict:
    """Every regular file below `root` with its bytes, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def job(agents, scratch):
    return OrbaxJob(agents, scratch)


def fresh_start(job: OrbaxJob, steps=(10, 20)):
    """The job's first start: nothing to restore; saves `steps`."""
    results = job.run(save=steps)
    for node, r in enumerate(results):
        assert r["process"] == node, r
        assert r["restored"] is None and r["saved"] == list(steps), r
    job.wait_replicated(steps[-1])
    return results


def test_fresh_start_saves_are_ingested_and_replicated(job):
    fresh_start(job)
    for node in range(NODES):
        info = (job.dir(node) / "jax-init-info.txt").read_text()
        assert info == f"{node}\n127.0.0.1:{job.jax_port}\n", info
        log = job.agents.log(node)
        assert "ingested step 20 " in log, log[-2000:]
        # The agent took both steps out of the client's view.
        assert not [p.name for p in job.dir(node).iterdir() if p.name.isdigit()], \
            sorted(p.name for p in job.dir(node).iterdir())
        # The peer holds the node's step byte for byte (Orbax writes
        # state/ocdbt.process_<n>/ and paths into commit_success.txt: the
        # copies of n and n + 2 differ, only peers' replicas are identical).
        peer = (node + 2) % NODES
        own = files(job.held(node, node, 20))
        assert any(name.startswith(f"state/ocdbt.process_{node}/") for name in own), sorted(own)
        assert files(job.held(peer, node, 20)) == own, (node, peer)


def test_restart_restores_every_node_from_its_own_ram(job):
    fresh_start(job)
    results = job.run(save=[30])
    for node, r in enumerate(results):
        assert r["restored"] == 20 and r["shards"] == 3 and r["saved"] == [30], r
        # Orbax saw one step: the cleanup left only the renamed marker.
        assert r["local_steps"] == [20], r
        assert job.agents.status(node)["last_restore"] == "step 20 from own store", node
        # Orbax renamed the marker to <step>: a link into the agent's store.
        link = job.dir(node) / "20"
        assert link.is_symlink() and os.readlink(link) == f".strata-agent/steps/{JOB}/{node}/20"
    job.wait_replicated(30)


def test_lost_node_restores_from_its_peer(job):
    fresh_start(job)
    job.agents.kill(2)
    shutil.rmtree(job.dir(2))  # the node's RAM disk is gone with it
    job.dir(2).mkdir()
    job.agents.start(2)
    results = job.run()
    for node, r in enumerate(results):
        assert r["restored"] == 20 and r["shards"] == 3, r
    restored = job.agents.status(2)["last_restore"]
    assert re.fullmatch(r"step 20 of node [02] from node 0", restored), restored
    for node in (0, 1, 3):
        assert job.agents.status(node)["last_restore"] == "step 20 from own store", node


def test_lost_cluster_restores_from_the_backup(job):
    fresh_start(job)
    committed = job.wait_log(0, rf"job {re.escape(JOB)}: backup (\S+) of step (\d+) committed")
    for node in range(NODES):
        job.agents.kill(node)
    # The newest committed backup (a later one may have committed meanwhile).
    step = max(int(s) for s in re.findall(
        rf"job {re.escape(JOB)}: backup \S+ of step (\d+) committed", job.agents.log(0)))
    assert step in (10, 20), committed.group(0)
    for node in range(NODES):
        shutil.rmtree(job.dir(node))
        job.dir(node).mkdir()
    for node in range(NODES):
        job.agents.start(node)
    results = job.run()
    for node, r in enumerate(results):
        assert r["restored"] == step and r["shards"] == 3, r
        restored = job.agents.status(node)["last_restore"]
        assert re.fullmatch(rf"step {step} of node {node % 2} from backup \S+", restored), \
            (node, restored)
