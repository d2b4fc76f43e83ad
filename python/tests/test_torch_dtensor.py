"""strata.torch and DTensors: two ranks (gloo on loopback, CPU) save an
FSDP2 (fully_shard) model, its optimizer and a distribute_tensor() DTensor,
each rank its local shards in its own directory; a fresh sharded model and
optimizer restore them and train on exactly as the uninterrupted run; layouts
that differ are refused naming the entry.

The test runs this file as each rank's program (see worker())."""

import datetime
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import strata
import strata.torch
from conftest import free_port

WORLD = 2
TIMEOUT_S = 240  # the whole two-rank run; init_process_group waits at most 60 s


def test_fsdp2_and_dtensor_state_round_trips_on_two_gloo_ranks(scratch):
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        pytest.skip(f"torch {torch.__version__} is built without torch.distributed or gloo")
    port = free_port()
    ranks = [subprocess.Popen([sys.executable, __file__, str(rank), str(port), str(scratch)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in range(WORLD)]
    outputs = []
    try:
        for p in ranks:
            outputs.append(p.communicate(timeout=TIMEOUT_S)[0])
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
                p.wait()
    for rank, (p, out) in enumerate(zip(ranks, outputs)):
        assert p.returncode == 0 and f"rank {rank}: ok" in out, \
            f"rank {rank} exited {p.returncode}:\n{out[-4000:]}"


# ---- the rank's program -------------------------------------------------

def sharded_model(mesh, seed, width=5):
    """An MLP whose parameters FSDP2 shards over `mesh`; `width` 5 does not
    divide evenly over two ranks (local shards of 3 and 2 rows)."""
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 3))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=0.01)


def train(model, opt, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(8, 4, generator=g)).square().mean().backward()
        opt.step()


def local_shards(model, opt):
    """Every tensor of the model's and optimizer's state as this rank holds it."""
    out = {f"model.{k}": v.to_local().clone() for k, v in model.state_dict().items()}
    for pid, s in opt.state_dict()["state"].items():
        for k, v in s.items():
            out[f"opt.{pid}.{k}"] = (v.to_local() if hasattr(v, "to_local") else v).clone()
    return out


def expect_refused(ckpt, state, pattern):
    with pytest.raises(strata.InvalidArgumentError, match=pattern):
        ckpt.restore(state)


def worker(rank: int, port: int, scratch: Path) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD, timeout=datetime.timedelta(seconds=60))
    mesh = init_device_mesh("cpu", (WORLD,))
    model, opt = sharded_model(mesh, seed=0)
    train(model, opt, 3, seed=rank)
    w = distribute_tensor(torch.arange(12.0).reshape(4, 3), mesh, [Shard(0)])
    with strata.torch.Checkpointer(str(scratch / f"rank{rank}")) as ckpt:
        ckpt.save(3, {"model": model, "optimizer": opt, "extra": {"w": w}})
        ckpt.wait()
        train(model, opt, 2, seed=10 + rank)
        reference = local_shards(model, opt)

        # A fresh model and an optimizer that has no state yet.
        model2, opt2 = sharded_model(mesh, seed=1)
        zeros = distribute_tensor(torch.zeros(4, 3), mesh, [Shard(0)])
        state = {"model": model2, "optimizer": opt2, "extra": {"w": zeros}}
        assert ckpt.restore(state) == 3
        got = state["extra"]["w"]
        assert isinstance(got, DTensor) and got.placements == (Shard(0),), got
        assert torch.equal(got.to_local(), w.to_local()) and got.shape == (4, 3)
        train(model2, opt2, 2, seed=10 + rank)
        resumed = local_shards(model2, opt2)
        assert resumed.keys() == reference.keys(), (resumed.keys(), reference.keys())
        for k, v in reference.items():
            assert isinstance(resumed[k], torch.Tensor) and torch.equal(resumed[k], v), k

        replicated = distribute_tensor(torch.zeros(4, 3), mesh, [Replicate()])
        expect_refused(ckpt, {"extra": {"w": replicated}},
                       r"step 3: DTensor 'extra\.w' has placements \['Shard\(dim=0\)'\] in the "
                       r"checkpoint but \['Replicate\(\)'\] here")
        expect_refused(ckpt, {"extra": {"w": torch.zeros(4, 3)}},
                       r"'extra\.w' is a DTensor in the checkpoint .* but a Tensor here")
        expect_refused(ckpt, {"model": sharded_model(mesh, seed=2, width=7)[0]},
                       r"DTensor 'model\.0\.weight' has global shape \[5, 4\] in the checkpoint "
                       r"but \[7, 4\] here")
        torch.manual_seed(3)
        expect_refused(ckpt, {"model": nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))},
                       r"'model\.0\.weight' is a DTensor in the checkpoint")
    dist.barrier()  # both directories are unlocked

    # The other rank's directory holds the other part of each tensor.
    with strata.torch.Checkpointer(str(scratch / f"rank{1 - rank}")) as ckpt:
        expect_refused(ckpt, {"extra": {"w": zeros}},
                       rf"DTensor 'extra\.w' was saved by the process at mesh coordinate "
                       rf"\[{1 - rank}\], not by this one \(\[{rank}\]\)")
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: ok", flush=True)


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
