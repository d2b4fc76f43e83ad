"""A real training job with Orbax's replicator checkpointing, interrupted by
`strata maintenance` and resumed at the on-demand step.

The closest real thing to MaxText with emergency (replicator) checkpointing
that this environment runs (MaxText needs Python 3.12): four JAX processes
on CPU (orbax_trainer.py), one per node, each under `strata run --agent`
against its node's agent, train a tiny MLP with Orbax 0.12.8's
``ReplicatorCheckpointManager`` and stop as MaxText's train loop does at
JAX's preemption sync point. The notice: `strata maintenance --agent` on
node 2 sends SIGTERM to the process registered in that node's sync map
(the trainer registers there itself: Orbax does not); JAX's preemption sync
manager spreads it, every process saves the same step and exits 75, and
every `strata run` restarts its trainer at once. The restarted job
restores that step from the nodes' own RAM and trains on; rank 0's loss
curve must equal, float for float (``repr``), the curve of an
uninterrupted run of the same job.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

import pytest

from conftest import STRATA_BIN, _children, free_ports, wait_all
from test_orbax import NODES, WORKER_ENV

if any(find_spec(m) is None for m in ("jax", "orbax")) or find_spec("orbax.checkpoint") is None:
    pytest.skip("needs the jax and orbax-checkpoint packages (python/requirements.lock)",
                allow_module_level=True)

TRAINER = Path(__file__).with_name("orbax_trainer.py")
STEPS = 50
SAVE_INTERVAL = 10
STEP_SECONDS = 0.1  # so that the notice lands mid-run
NOTICE_AFTER = 15   # rank 0's step when the test calls `strata maintenance`
MAINTENANCE_NODE = 2
# `strata maintenance --grace`: the ranks' time to leave, and how long the
# agent then waits for its own on-demand step (which Orbax does not save,
# see below) while holding the node's restart.
GRACE_SECONDS = 10
RUN_TIMEOUT = 120   # seconds for every supervisor of a run to finish


class Job:
    """Four nodes' agents, and a run of the trainer under `strata run` on each."""

    def __init__(self, agents, root: Path):
        self.root = root
        self.jax_port = free_ports(1)[0]
        self.agents = agents(NODES, args=[
            "--node-rank", "{node}", "--jax-coordinator", f"127.0.0.1:{self.jax_port}"])
        self.runs = []  # (name, supervisors)

    def log(self, name: str, node: int) -> Path:
        return self.root / f"{name}-node{node}.log"

    def start(self, name: str):
        """One `strata run` per node around the trainer of job `name`."""
        env = dict(os.environ, **WORKER_ENV)
        procs = []
        for node in range(NODES):
            with open(self.log(name, node), "w") as out:
                p = subprocess.Popen(
                    [STRATA_BIN, "run", "--agent", self.agents.socket(node), "--max-restarts", "2",
                     "--backoff", "100ms,1s", "--grace", "30s", "--",
                     sys.executable, str(TRAINER), "--local-dir", str(self.agents.dir(node)),
                     "--job", name, "--steps", str(STEPS), "--save-interval",
                     str(SAVE_INTERVAL), "--step-seconds", str(STEP_SECONDS),
                     "--timeout", str(RUN_TIMEOUT)],
                    stdout=out, stderr=subprocess.STDOUT, env=env)
            _children.append(p)
            procs.append(p)
        self.runs.append((name, procs))
        return procs

    def stop(self) -> None:
        """Kills what a failed test left running. A supervisor killed by
        SIGKILL leaves its trainer's process group behind: that goes first."""
        for name, procs in self.runs:
            for node, p in enumerate(procs):
                if p.poll() is not None:
                    continue
                log = self.log(name, node).read_text(errors="replace")
                for pid in re.findall(r"^strata run: start attempt=\d+ pid=(\d+)", log, re.M):
                    try:
                        os.killpg(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                p.kill()
                p.wait()

    def finish(self, name: str, procs) -> list:
        """Waits for the supervisors; every node's log, after each exited 0."""
        try:
            wait_all(procs, RUN_TIMEOUT)
        finally:
            self.stop()  # before any kill: it finds the trainers through live supervisors
        logs = [self.log(name, n).read_text(errors="replace") for n in range(NODES)]
        for node, (p, text) in enumerate(zip(procs, logs)):
            assert p.returncode == 0, (f"{name}, node {node}: strata run exited "
                                       f"{p.returncode}\n{text[-4000:]}\nagent {node}:\n"
                                       f"{self.agents.log(node)[-2000:]}")
        return logs

    def wait_loss(self, name: str, step: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not re.search(rf"^LOSS {step} ", self.log(name, 0).read_text(errors="replace"),
                            re.M):
            assert time.monotonic() < deadline, \
                f"rank 0 never reached step {step}:\n{self.log(name, 0).read_text()[-3000:]}"
            time.sleep(0.05)


def attempts(log: str) -> list:
    """The trainer's output of each attempt of `strata run`, in order."""
    parts = re.split(r"^strata run: start attempt=\d+ .*$", log, flags=re.M)
    return parts[1:]


def losses(text: str) -> dict:
    return {int(s): v for s, v in re.findall(r"^LOSS (\d+) (\S+)$", text, re.M)}


@pytest.fixture
def job(agents, scratch):
    j = Job(agents, scratch)
    yield j
    j.stop()


def test_maintenance_resumes_training_at_the_on_demand_step(job):
    reference = job.finish("reference", job.start("reference"))
    curve = losses(reference[0])
    assert sorted(curve) == list(range(1, STEPS + 1)), reference[0][-3000:]
    assert float(curve[STEPS]) < float(curve[1]), curve  # it learns

    procs = job.start("train")
    job.wait_loss("train", NOTICE_AFTER)
    m = subprocess.run([STRATA_BIN, "maintenance", "--json",
                        "--agent", job.agents.address(MAINTENANCE_NODE),
                        "--secret-file", str(job.agents.secret), "--grace", f"{GRACE_SECONDS}s"],
                       capture_output=True, text=True, timeout=GRACE_SECONDS + 30)
    logs = job.finish("train", procs)

    # The notice reached the one process registered on node 2, which left
    # in time by itself.
    event = json.loads(m.stdout)
    assert event["ranks"] == 1 and event["ranks_killed"] == 0, (m.returncode, m.stdout, m.stderr)

    # Every process saved the same on-demand step past the notice, exited 75,
    # and was restarted at once; the restart restored that step.
    runs = [attempts(log) for log in logs]
    step = int(re.search(r"^ON-DEMAND (\d+)$", runs[0][0], re.M).group(1))
    for node, (log, parts) in enumerate(zip(logs, runs)):
        assert len(parts) == 2, (node, log[-3000:])
        assert re.findall(r"^ON-DEMAND (\d+)$", parts[0], re.M) == [str(step)], \
            (node, step, log[-3000:])
        assert re.search(r"^strata run: exit attempt=1 code=75 .*\n"
                         r"strata run: the command stopped after its on-demand checkpoint "
                         r"\(exit code 75\): restarting at once$", parts[0], re.M), \
            (node, parts[0][-2000:])
        assert re.search(rf"^RESTORED {step}$", parts[1], re.M), (node, parts[1][-3000:])
        assert f"DONE {STEPS}" in parts[1], (node, parts[1][-3000:])
        assert job.agents.status(node)["last_restore"] == f"step {step} from own store", node
    assert NOTICE_AFTER < step < STEPS, step

    # The agents decide an on-demand step of their own from the steps in the
    # sync maps; the job saves JAX's. Unless the two agree, the event says
    # work may be lost (exit 1): with Strata's step decided before the rank
    # left, after waiting for it until the end of the grace period (holding
    # the node's restart); with none decided yet, at once.
    if event.get("sync_step") == step and event["saved"]:
        assert m.returncode == 0, (m.returncode, m.stdout)
    else:
        assert m.returncode == 1 and not event["saved"], (step, m.returncode, m.stdout)
        if "sync_step" in event:
            assert event["seconds"] >= GRACE_SECONDS - 1, (step, event)

    # Rank 0's curve: steps 1..S before the notice, S+1..end after the
    # restart, each exactly the uninterrupted run's.
    before, after = losses(runs[0][0]), losses(runs[0][1])
    assert sorted(before) == list(range(1, step + 1)), sorted(before)
    assert sorted(after) == list(range(step + 1, STEPS + 1)), sorted(after)
    assert {**before, **after} == curve
