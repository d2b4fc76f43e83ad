"""A real PyTorch training job (python/examples/train_mlp.py) interrupted
and resumed with Strata ends with the same parameters and optimizer state,
bit for bit, as the run that was never interrupted."""

import os
import shutil
import signal
import time

from conftest import Trainer, free_port, run_trainer

STEPS = 120


def test_sigterm_saves_on_demand_and_the_restart_resumes_bit_for_bit(scratch):
    reference = run_trainer(scratch / "reference", "--steps", STEPS).digest()

    run = scratch / "run"
    first = Trainer(run, "--steps", STEPS, "--step-sleep", "0.02", "--exit-after-ondemand")
    first.wait_for_line("step=37")  # mid-run, between two interval saves (30, 40)
    first.proc.send_signal(signal.SIGTERM)
    assert first.finish() == 75, "\n".join(first.lines[-5:]) + first.stderr_tail()
    saved = int(first.line("ondemand checkpoint step=").split("=")[1])
    assert 37 <= saved < STEPS  # the step after the notice (output may lag a few steps)

    second = run_trainer(run, "--steps", STEPS)
    assert second.lines[0] == f"restored step={saved}"
    assert second.digest() == reference


def test_a_run_cut_without_notice_resumes_from_its_last_interval_save(scratch):
    reference = run_trainer(scratch / "reference", "--steps", STEPS).digest()
    run_trainer(scratch / "run", "--steps", STEPS, "--stop-at-step", 65)
    resumed = run_trainer(scratch / "run", "--steps", STEPS)
    assert resumed.lines[0] == "restored step=60"
    assert resumed.digest() == reference


def distributed(world: int, dirs, *args, agent_job: str = ""):
    """Runs `world` ranks with torch.distributed (gloo on loopback)."""
    port = free_port()
    ranks = []
    for rank in range(world):
        env = {"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port)}
        extra = ["--agent-job", agent_job] if agent_job else []
        ranks.append(Trainer(dirs[rank], "--steps", STEPS, *args, *extra, env=env))
    for rank, t in enumerate(ranks):
        rc = t.finish()
        assert rc == 0, f"rank {rank} exited {rc}:\n" + "\n".join(t.lines[-5:]) + \
            t.stderr_tail()
    return ranks


def test_two_gloo_ranks_recover_a_lost_node_from_its_peer(scratch, agents):
    reference = distributed(2, [scratch / "ref0", scratch / "ref1"])
    assert reference[0].digest() == reference[1].digest()  # data parallel: same state

    nodes = agents(2)
    dirs = [nodes.dir(0), nodes.dir(1)]
    cut = distributed(2, dirs, "--stop-at-step", 65, agent_job="mlp")
    assert [t.lines[0] for t in cut] == ["fresh start", "fresh start"]

    # Node 1 goes away with its RAM once its last save (60) is on its peer;
    # a replacement starts with an empty directory.
    deadline = time.monotonic() + 60
    while "holding replica mlp/1/60 " not in nodes.log(0):
        assert time.monotonic() < deadline, nodes.log(0)[-3000:]
        time.sleep(0.05)
    nodes.kill(1)
    shutil.rmtree(dirs[1])
    assert not os.path.exists(dirs[1])
    nodes.start(1)

    resumed = distributed(2, dirs, agent_job="mlp")
    restored = [t.lines[0] for t in resumed]
    assert restored[0] == restored[1] and restored[0].startswith("restored step="), restored
    assert restored[0] == "restored step=60"
    assert "restored mlp/1/60 from node 0" in nodes.log(1), nodes.log(1)[-3000:]
    assert resumed[0].digest() == reference[0].digest()
    assert resumed[1].digest() == reference[0].digest()
