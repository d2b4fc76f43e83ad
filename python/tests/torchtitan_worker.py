"""One rank of a TorchTitan job checkpointed by strata.torchtitan
(test_torchtitan.py), on CPU with gloo.

TorchTitan's trainer needs a GPU (its device type falls back to "cuda"),
so this drives TorchTitan's checkpoint manager exactly as
torchtitan.trainer.Trainer does: the manager is built from the job's
configuration (TorchTitan's llama3 debug-model configuration, its
checkpoint section switched to Strata with strata.torchtitan.on_strata)
with Trainer's arguments -- TorchTitan's ModelWrapper over the model parts,
its OptimizersContainer and LRSchedulersContainer built from that
configuration, its ParallelAwareDataloader (a StatefulDataLoader), and the
trainer's own train state (step, ntokens_seen) -- then load(step=load_step),
and per step: maybe_wait_for_staging() before the optimizer step,
save(step, last_step=...), and close() at the end. The model is a small
FSDP2 (fully_shard) MLP over token embeddings (TorchTitan's debug
transformer needs its flex-attention masks from the trainer).

Each step's global loss is printed as "LOSS <step> <repr>"; the last line
is "RESULT <json>". `--notice-at K`: rank 0 sends itself SIGTERM after step
K (a maintenance notice); the job then saves one on-demand step and exits 75.
"""

import argparse
import datetime
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.stateful import Stateful
from torch.utils.data import IterableDataset
from torchtitan.components.dataloader import ParallelAwareDataloader
from torchtitan.models.llama3.config_registry import llama3_debugmodel

import strata
from strata.torchtitan import StrataCheckpointManager, on_strata

VOCAB, DIM, SEQ = 64, 16, 8


class Tokens(IterableDataset, Stateful):
    """An endless, seeded token stream per data-parallel rank that can
    resume where its state says (as TorchTitan's HuggingFaceTextDataset)."""

    def __init__(self, rank: int) -> None:
        self.rank, self.sample = rank, 0

    def __iter__(self):
        while True:
            g = torch.Generator().manual_seed(7919 * self.rank + self.sample)
            self.sample += 1
            tokens = torch.randint(0, VOCAB, (SEQ + 1,), generator=g)
            yield {"input": tokens[:-1]}, tokens[1:]

    def state_dict(self):
        return {"sample": self.sample}

    def load_state_dict(self, state_dict) -> None:
        self.sample = state_dict["sample"]


class TrainState(Stateful):
    """Trainer.state_dict / load_state_dict: what TorchTitan's trainer saves."""

    def __init__(self) -> None:
        self.step, self.ntokens_seen = 0, 0

    def state_dict(self):
        return {"step": self.step, "ntokens_seen": self.ntokens_seen}

    def load_state_dict(self, state_dict) -> None:
        self.step, self.ntokens_seen = state_dict["step"], state_dict["ntokens_seen"]


def build_model(mesh) -> nn.Module:
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(VOCAB, DIM), nn.Linear(DIM, 2 * DIM), nn.GELU(),
                          nn.Linear(2 * DIM, VOCAB))
    for layer in model:
        if any(True for _ in layer.parameters()):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--dir", required=True, help="Strata directory (template with {rank})")
    p.add_argument("--job", default="")
    p.add_argument("--dump", required=True, help="TorchTitan's dump folder")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--interval", type=int, default=4)
    p.add_argument("--async-mode", default="async")
    p.add_argument("--notice-at", type=int, default=0)
    p.add_argument("--crash-at", type=int, default=0, help="exit 3 after this step's save")
    p.add_argument("--step-seconds", type=float, default=0.05,
                   help="a pause per step, so that a notice lands mid-run")
    args = p.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=120))
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (args.world,))

    # The job's configuration: TorchTitan's own, its checkpoint section on Strata.
    config = on_strata(llama3_debugmodel(), directory=args.dir, job=args.job,
                       interval=args.interval, async_mode=args.async_mode,
                       last_save_model_only=False, agent_timeout=60)
    config.training.steps = args.steps
    config.optimizer.implementation = "for-loop"
    assert isinstance(config.checkpoint, StrataCheckpointManager.Config)

    model = build_model(mesh)
    optimizers = config.optimizer.build(model_parts=[model])
    lr_schedulers = config.lr_scheduler.build(optimizers=optimizers,
                                              training_steps=config.training.steps)
    dataloader = ParallelAwareDataloader(Tokens(args.rank), dp_rank=args.rank,
                                         dp_world_size=args.world, batch_size=2)
    train_state = TrainState()
    checkpointer = config.checkpoint.build(
        dataloader=dataloader, model_parts=[model], optimizers=optimizers,
        lr_schedulers=lr_schedulers, states={"train_state": train_state}, sd_adapter=None,
        base_folder=args.dump)
    assert isinstance(checkpointer, StrataCheckpointManager)

    result = {"rank": args.rank, "loaded": None}
    checkpointer.load(step=config.checkpoint.load_step)
    if train_state.step:
        result["loaded"] = train_state.step
        result["sources"] = checkpointer.last_load_sources
    data = iter(dataloader)
    loss_fn = nn.CrossEntropyLoss()
    while train_state.step < config.training.steps:
        train_state.step += 1
        time.sleep(args.step_seconds)
        inputs, labels = next(data)
        loss = loss_fn(model(inputs["input"]).flatten(0, 1), labels.flatten())
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), config.training.max_norm, foreach=True)
        checkpointer.maybe_wait_for_staging()
        optimizers.step()
        lr_schedulers.step()
        optimizers.zero_grad()
        train_state.ntokens_seen += labels.numel() * args.world
        total = loss.detach().clone()
        dist.all_reduce(total)
        print(f"LOSS {train_state.step} {float(total) / args.world!r}", flush=True)
        try:
            checkpointer.save(train_state.step,
                              last_step=train_state.step == config.training.steps)
        except SystemExit as e:  # the on-demand step is committed: leave as the trainer would
            result["on_demand"] = train_state.step
            print("RESULT " + json.dumps(result), flush=True)
            os._exit(e.code)
        if train_state.step == args.crash_at:
            checkpointer.maybe_wait_for_saving()  # the test knows which step is committed
            sys.stdout.flush()
            os._exit(3)  # a failure
        if args.notice_at and train_state.step == args.notice_at and args.rank == 0:
            os.kill(os.getpid(), signal.SIGTERM)  # a maintenance notice to one process
    checkpointer.maybe_wait_for_saving()
    checkpointer.close()
    dist.barrier()
    dist.destroy_process_group()
    print("RESULT " + json.dumps(result), flush=True)
    sys.stderr.flush()
    os._exit(0)  # as dcp_worker.py: gloo's teardown sometimes aborts after this


if __name__ == "__main__":
    sys.exit(main())
