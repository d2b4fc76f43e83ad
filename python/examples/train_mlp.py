#!/usr/bin/env python3
"""A PyTorch training job that checkpoints with Strata (docs/python.md).

A small MLP learns a synthetic regression task, deterministically: the same
seed gives the same parameters bit for bit, however often the run is
interrupted and resumed. Every piece of state that decides the next step is
in the checkpoint: model, optimizer, LR schedule, the global RNGs (dropout
draws from them), the loader's generator and its position in the epoch.

One process:
    train_mlp.py --dir /dev/shm/ckpt --steps 200 --exit-after-ondemand
SIGTERM makes it save an on-demand checkpoint at the next step and exit 75;
run it again (or under `strata run`) and it resumes where it stopped.

Several processes with torch.distributed (gloo), one node agent each:
    RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \\
        train_mlp.py --dir /dev/shm/node-r --agent-job myjob ...
The agents replicate every checkpoint to a peer node and decide, at start,
which step every rank restores (from its own RAM or from a peer's).

Output lines (the tests read them): "fresh start" | "restored step=S",
"step=N" after each step, "ondemand checkpoint step=S",
"final step=N digest=<sha256 of parameters and optimizer state>".
"""

import argparse
import hashlib
import itertools
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import strata
import strata.torch


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", required=True, help="checkpoint directory (the node's RAM disk)")
    p.add_argument("--steps", type=int, default=120, help="train until this step")
    p.add_argument("--save-interval-steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--width", type=int, default=256, help="hidden layer width")
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="extra seconds per step, standing for accelerator time")
    p.add_argument("--exit-after-ondemand", action="store_true",
                   help="exit 75 after the on-demand checkpoint a SIGTERM asks for")
    p.add_argument("--stop-at-step", type=int, default=0,
                   help="stop (exit 0) once this step is saved, as if the job were cut")
    p.add_argument("--agent-job", default="",
                   help="restore through the node agent, as this job (RANK/WORLD_SIZE give "
                        "the node rank and count)")
    return p.parse_args()


def make_data(seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4096, 32, generator=g)
    w = torch.randn(32, 8, generator=g)
    y = torch.tanh(x @ w) + 0.01 * torch.randn(4096, 8, generator=g)
    return TensorDataset(x, y)


def make_model(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(32, width), nn.ReLU(), nn.Dropout(0.1),
                         nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 8))


def digest(model: nn.Module, optimizer: torch.optim.Optimizer) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    for pid, s in sorted(optimizer.state_dict()["state"].items()):
        for k, v in sorted(s.items()):
            h.update(f"{pid}.{k}".encode())
            h.update(v.contiguous().numpy().tobytes() if torch.is_tensor(v) else repr(v).encode())
    return h.hexdigest()


def main() -> int:
    args = parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    code = train(args, rank, world)
    # Every normal return, the on-demand exit too, ends the process group:
    # a gloo group left to interpreter teardown can abort the process
    # ("terminate called without an active exception"), and the exit code
    # the supervisor reads would be lost. Not on an exception: the other
    # ranks may be inside a collective, and destroying would hang.
    if world > 1:
        dist.destroy_process_group()
    return code


def train(args: argparse.Namespace, rank: int, world: int) -> int:
    data = make_data(args.seed)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed, drop_last=True)
    loader_rng = torch.Generator().manual_seed(args.seed)  # keeps loaders off the global RNG
    loader = DataLoader(data, batch_size=32, sampler=sampler, drop_last=True,
                        generator=loader_rng)
    model = make_model(args.width)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)

    options = dict(save_interval_steps=args.save_interval_steps,
                   exit_after_ondemand=args.exit_after_ondemand)
    if args.agent_job:
        options["agent_job"] = strata.AgentJob(args.agent_job, node_rank=rank, nodes=world)
    state = {"model": model, "optimizer": optimizer, "scheduler": scheduler,
             "rng": strata.torch.RNGState(), "loader_rng": loader_rng,
             "loader": {"epoch": 0, "next_batch": 0}}
    # Closed on every way out, so its threads end before the interpreter does.
    with strata.torch.Checkpointer(args.dir, **options) as ckpt:
        restored = ckpt.restore(state)
        print("fresh start" if restored is None else f"restored step={restored}", flush=True)
        first = 1 if restored is None else restored + 1

        ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
        epoch, next_batch = state["loader"]["epoch"], state["loader"]["next_batch"]
        step = first
        while step <= args.steps:
            sampler.set_epoch(epoch)
            for x, y in itertools.islice(loader, next_batch, None):
                if step > args.steps:
                    break
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(ddp(x), y)
                loss.backward()
                optimizer.step()
                scheduler.step()
                next_batch += 1
                if args.step_sleep > 0:
                    time.sleep(args.step_sleep)
                print(f"step={step}", flush=True)
                if ckpt.should_save(step):
                    state["loader"] = {"epoch": epoch, "next_batch": next_batch}
                    result = ckpt.save(step, state)
                    if result.on_demand:
                        print(f"ondemand checkpoint step={step}", flush=True)
                    if result.should_exit:
                        return strata.EXIT_AFTER_ON_DEMAND
                if step == args.stop_at_step:
                    ckpt.wait()
                    print(f"stopped at step={step}", flush=True)
                    return 0
                step += 1
            epoch, next_batch = epoch + 1, 0
        ckpt.wait()
        print(f"final step={args.steps} digest={digest(model, optimizer)}", flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(main())
