"""One rank of the DCP test job (test_dcp.py): an FSDP2 (fully_shard) MLP
and its AdamW on CPU with gloo, checkpointed with torch.distributed.checkpoint
through strata.dcp.

It loads what the reader finds (dcp.load into a fresh sharded model and an
optimizer that never stepped), then trains and saves `--save` steps with
dcp.async_save overlapped with the next training step, TorchTitan style.
At each saved step rank 0 writes the full state (every DTensor gathered) to
`--ref/<step>.pt`; after a load every rank compares the full state it
loaded with that file, bit for bit. The last line is "RESULT <json>"."""

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

import strata
from strata.dcp import StrataStorageReader, StrataStorageWriter

WIDTH = 7  # 7 rows over 4 ranks: local shards of 2, 2, 2, 1 (over 2 ranks: 4, 3)


class AppState(Stateful):
    """Model and optimizer as DCP's state_dict helpers see them (TorchTitan's
    ModelWrapper and OptimizersContainer in one)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer = model, optimizer

    def state_dict(self):
        model, optim = get_state_dict(self.model, self.optimizer)
        return {"model": model, "optim": optim}

    def load_state_dict(self, state_dict) -> None:
        set_state_dict(self.model, self.optimizer, model_state_dict=state_dict["model"],
                       optim_state_dict=state_dict["optim"])


def build(mesh):
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 3))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=0.01)


def train_step(model, optimizer, step: int, rank: int) -> None:
    g = torch.Generator().manual_seed(1000 * step + rank)
    optimizer.zero_grad()
    model(torch.randn(4, 5, generator=g)).square().mean().backward()
    optimizer.step()


def full_state(app: AppState) -> dict:
    """Every tensor of the state, gathered whole (collective), and the rest."""
    def full(v):
        return v.full_tensor() if hasattr(v, "full_tensor") else v
    sd = app.state_dict()
    out = {f"model.{k}": full(v).detach().clone() for k, v in sd["model"].items()}
    for fqn, state in sd["optim"]["state"].items():
        for k, v in state.items():
            out[f"optim.{fqn}.{k}"] = full(v).detach().clone() if torch.is_tensor(v) else v
    out["param_groups"] = json.dumps(sd["optim"]["param_groups"], sort_keys=True)
    return out


def differences(got: dict, want: dict) -> list:
    if got.keys() != want.keys():
        return [f"keys {sorted(got.keys() ^ want.keys())}"]
    return [k for k, v in want.items()
            if not (torch.equal(got[k], v) if torch.is_tensor(v) else got[k] == v)]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--dir", required=True, help="directory template with {rank}")
    p.add_argument("--job", default="", help="agent job name ('' : no agent)")
    p.add_argument("--backup", default=None, help="file:// URL for the reader")
    p.add_argument("--backup-interval-steps", type=int, default=0)
    p.add_argument("--save", default="", help="steps to save, comma-separated")
    p.add_argument("--ref", required=True, help="directory of the reference states")
    args = p.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=60))
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (args.world,))
    model, optimizer = build(mesh)
    app = AppState(model, optimizer)
    job = None
    if args.job:
        job = strata.AgentJob(args.job, node_rank=args.rank, nodes=args.world, timeout=60,
                              backup_interval_steps=args.backup_interval_steps)
    result = {"rank": args.rank, "restored": None, "saved": [], "decoded": []}
    # The steps whose DCP metadata this rank decodes (choosing and loading).
    decode = strata._dcp_copies._read_info
    for module in (strata._dcp_copies, strata._dcp_reader):  # both names of it
        module._read_info = lambda c: result["decoded"].append(c.step) or decode(c)

    reader = StrataStorageReader(args.dir, agent_job=job, job=args.job or None,
                                 backup=args.backup)
    try:
        step = reader.step
    except strata.Error as e:  # reported: the test checks how every rank fails
        step, result["error"] = None, f"{type(e).__name__}: {e}"
    if step is not None:
        dcp.load({"app": app}, storage_reader=reader)
        want = torch.load(Path(args.ref) / f"{step}.pt", weights_only=True)
        result["restored"] = step
        result["differences"] = differences(full_state(app), want)
        result["sources"] = reader.sources

    saves = [int(s) for s in args.save.split(",") if s]
    if saves:
        writer = StrataStorageWriter(args.dir, agent_job=job)
        checkpoint_group = dist.new_group(backend="gloo")  # async saves talk on their own group
        pending = None
        for s in range((step or 0) + 1, max(saves) + 1):
            train_step(model, optimizer, s, args.rank)
            if s not in saves:
                continue
            if pending is not None:
                pending.result()  # the previous save is committed on this rank
            reference = full_state(app)
            if args.rank == 0:
                torch.save(reference, Path(args.ref) / f"{s}.pt")
            # DCP's default planner, and checkpoint_id as TorchTitan passes it.
            pending = dcp.async_save({"app": app}, storage_writer=writer,
                                     checkpoint_id=os.path.join(args.dir, f"step-{s}"),
                                     process_group=checkpoint_group)
            result["saved"].append(s)
        pending.result()
        writer.close()
    dist.barrier()
    dist.destroy_process_group()
    print("RESULT " + json.dumps(result), flush=True)
    sys.stderr.flush()
    # Not a normal interpreter exit: torch's gloo threads sometimes abort the
    # teardown ("terminate called without an active exception", exit -6)
    # after everything here is done and reported; seen about once in four
    # loads in one session. The run is judged by RESULT and what is on disk.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
