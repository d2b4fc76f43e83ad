"""TorchTitan's checkpoint manager on Strata (strata.torchtitan), selected by
the job's configuration and driven as TorchTitan's trainer drives it
(torchtitan_worker.py: two gloo ranks on the CPU, one per simulated node,
each node with a real `strata agent`, peers 0 <-> 1).

One job, run four times on the same agents:
1. a fresh start that fails after step 6 (saved: step 4, async);
2. a restart: step 4 comes back from each node's RAM; at step 9 rank 0
   gets a maintenance notice (SIGTERM), the job saves one on-demand step
   and every rank exits 75;
3. node 1 lost with its RAM (directory wiped, agent restarted): the
   restart loads the on-demand step, node 1's part from its peer, and
   trains to the end.
Every step's loss, in every run, equals (float for float) the loss of the
same step in an uninterrupted run of the same job without agents.
"""

import os
import re
import shutil
import tempfile
from importlib.util import find_spec
from pathlib import Path

import pytest

from conftest import Agents, run_ranks

if find_spec("torchtitan") is None:
    pytest.skip("needs torchtitan (python/requirements.lock)", allow_module_level=True)

WORKER = Path(__file__).with_name("torchtitan_worker.py")
NODES = 2
STEPS = 24
JOB = "titan"
RUN_TIMEOUT = 400  # seconds for every rank of a run
ENV = {"OMP_NUM_THREADS": "1"}


def run(root: Path, name: str, directory: str, *args, job: str = "", codes=(0,)) -> tuple:
    """Runs the NODES ranks; ({step: loss} of rank 0, RESULT objects)."""
    ranks = run_ranks(WORKER, root, name, NODES,
                      ["--dir", directory, "--job", job, "--dump", root / "dump",
                       "--steps", STEPS, *args], env=ENV, timeout=RUN_TIMEOUT, codes=codes)
    losses = {int(s): v for s, v in re.findall(r"^LOSS (\d+) (\S+)$", ranks[0][1], re.M)}
    return losses, [result for result, _ in ranks]


@pytest.fixture(scope="module")
def root():
    path = Path(tempfile.mkdtemp(prefix="strata-pytest-titan-",
                                 dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_torchtitan_job_restarts_from_ram_peer_and_notice_on_the_same_curve(root):
    reference, _ = run(root, "reference", str(root / "local{rank}"))
    assert sorted(reference) == list(range(1, STEPS + 1)), reference

    agents = Agents(root, NODES)
    try:
        for node in range(NODES):
            agents.start(node)
        directory = str(root / "node{rank}")
        # 1. Fresh start; the job fails after step 6 (step 4 committed).
        losses, results = run(root, "first", directory, "--crash-at", 6, job=JOB, codes=(3,))
        assert losses == {s: reference[s] for s in range(1, 7)}, losses
        # 2. Restart from the nodes' RAM; a notice at step 9 ends it on demand.
        losses, results = run(root, "second", directory, "--notice-at", 9, job=JOB,
                              codes=(75,))
        for r in results:
            assert r["loaded"] == 4 and set(r["sources"].values()) == {"anchor"}, r
        on_demand = {r["on_demand"] for r in results}
        assert len(on_demand) == 1 and 9 < next(iter(on_demand)) < STEPS, results
        step = next(iter(on_demand))
        assert losses == {s: reference[s] for s in range(5, step + 1)}, losses
        # 3. Node 1 lost with its RAM: its part comes back from its peer.
        agents.kill(1)
        shutil.rmtree(agents.dir(1))
        agents.start(1)
        losses, results = run(root, "third", directory, job=JOB)
        for r in results:
            assert r["loaded"] == step, r
        assert losses == {s: reference[s] for s in range(step + 1, STEPS + 1)}, losses
        assert agents.status(1)["last_restore"] == f"step {step} of node 1 from node 0"
        assert agents.status(0)["last_restore"] == f"step {step} from own store"
    finally:
        agents.stop()
