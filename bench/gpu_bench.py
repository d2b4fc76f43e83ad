#!/usr/bin/env python3
"""How long checkpointing a training state blocks the loop, against the copy
limits of the machine, in one run: strata.torch against t.cpu(),
torch.save/torch.load and torch.distributed.checkpoint (DCP).

State: an nn.Sequential of Linear layers with AdamW state (params, exp_avg,
exp_avg_sq), about `--size-mib` MiB in all, on `--device` (default: cuda
when present, else cpu). Every figure is a median of `--reps`.

  limits     pinned device->host and host->device copy of the whole state
             into / from one page-locked buffer (the floor for a save's and
             a restore's copy), and t.cpu() per tensor
  torch      torch.save to tmpfs, torch.load(weights_only=True) + load_state_dict
  dcp        dcp.async_save (default stager, and a pinned stager where this
             torch has one): time until it returns; dcp.load
  strata     strata.torch blocking save and overlapped save (time save()
             blocks the loop, and what an overlapped save adds to a
             training step whose forward/backward outlasts the copy),
             restore into the live model and optimizer
  dcp        also through Strata: dcp.async_save with StrataStorageWriter
             (time until it returns) and dcp.load with StrataStorageReader

Prints `ratio <name> <value> target <t>` lines (value = Strata's time over
the baseline's, or the other way round, as the name says) and a table.
On CPU the copy "limits" are memcpy into a preallocated buffer.

Usage: gpu_bench.py [--size-mib N] [--reps N] [--tmpfs DIR] [--device cpu|cuda]
                    [--json FILE]
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import time
import traceback
import warnings

import torch
from torch import nn

import strata
import strata.torch


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cuda = torch.cuda.is_available()
    p.add_argument("--size-mib", type=int, default=4096 if cuda else 256)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--tmpfs", default="/dev/shm" if os.path.isdir("/dev/shm") else "/tmp")
    p.add_argument("--device", default="cuda" if cuda else "cpu")
    p.add_argument("--json", default="", help="also write the results here")
    p.add_argument("--skip", default="", help="comma-separated groups to skip: torch,dcp")
    return p.parse_args()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def make_state(size_mib: int, device: str):
    """Linear layers of width w; AdamW state triples the parameters' bytes."""
    width = 4096 if size_mib >= 1024 else 1024
    layer_bytes = (width * width + width) * 4 * 3
    layers = max(2, (size_mib << 20) // layer_bytes)
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(8, width, device=device)
    model(x).square().mean().backward()
    opt.step()  # creates exp_avg and exp_avg_sq
    opt.zero_grad(set_to_none=True)
    sync(device)
    return model, opt


def tensors_of(model, opt):
    out = list(model.state_dict().values())
    for s in opt.state.values():
        out += [v for v in s.values() if torch.is_tensor(v)]
    return out


def timed(fn, reps, before=None, device="cpu"):
    samples = []
    for _ in range(reps):
        if before:
            before()
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


class Results:
    def __init__(self, nbytes):
        self.nbytes, self.rows, self.ratios = nbytes, [], []

    def row(self, name, seconds, note=""):
        self.rows.append((name, seconds, note))
        print(f"  {name:<44} {seconds * 1e3:10.2f} ms  {self.nbytes / seconds / 1e9:7.2f} GB/s"
              f"  {note}", flush=True)
        return seconds

    def ratio(self, name, value, target):
        self.ratios.append((name, value, target))
        print(f"ratio {name} {value:.3f} target {target}", flush=True)


def main() -> int:
    args = parse_args()
    device = args.device
    skip = set(filter(None, args.skip.split(",")))
    model, opt = make_state(args.size_mib, device)
    ts = tensors_of(model, opt)
    nbytes = sum(t.numel() * t.element_size() for t in ts)
    gpu = torch.cuda.get_device_name() if device.startswith("cuda") else "none"
    print(f"== gpu_bench: {nbytes / 2**20:.0f} MiB of model + AdamW state in {len(ts)} tensors "
          f"on {device} ({gpu}), torch {torch.__version__}, strata {strata.__version__}, "
          f"{args.reps} reps (median), scratch {args.tmpfs}", flush=True)
    scratch = os.path.join(args.tmpfs, f"strata-gpu-bench-{os.getpid()}")
    os.mkdir(scratch)
    r = Results(nbytes)
    reps = args.reps
    try:
        cuda = device.startswith("cuda")
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=cuda)
        views, off = [], 0
        for t in ts:
            n = t.numel() * t.element_size()
            views.append(host[off:off + n].view(t.dtype).view(t.shape))
            off += n

        def d2h():
            for v, t in zip(views, ts):
                v.copy_(t, non_blocking=True)

        def h2d():
            for v, t in zip(views, ts):
                t.copy_(v, non_blocking=True)

        print("\n[limits]")
        lim_d2h = r.row("pinned D2H copy (one buffer)" if cuda else "memcpy into a buffer",
                        timed(d2h, reps, device=device))
        lim_h2d = r.row("pinned H2D copy (one buffer)" if cuda else "memcpy from a buffer",
                        timed(h2d, reps, device=device))
        r.row("t.cpu() per tensor", timed(lambda: [t.cpu() for t in ts], reps, device=device))
        del host, views

        state = {"model": model, "optimizer": opt}
        print("\n[strata]")
        with strata.torch.Checkpointer(os.path.join(scratch, "strata")) as ckpt:
            ckpt.save(0, state)  # allocates the arena
            ckpt.wait()
            steps = iter(range(1, 10 * reps + 10))
            blocking = r.row("strata.torch save() blocking",
                             timed(lambda: ckpt.save(next(steps), state), reps,
                                   before=ckpt.wait, device="cpu"))
            ckpt.wait()
            overlapped = r.row("strata.torch save(overlap=True)",
                               timed(lambda: ckpt.save(next(steps), state, overlap=True),
                                     reps, before=ckpt.wait, device="cpu"),
                               "returns once the copies are enqueued")
            ckpt.wait()
            overlap_cost = overlapped_step_cost(r, ckpt, state, model, opt, lim_d2h, reps,
                                                device, steps)
            ckpt.wait()
            restore = r.row("strata.torch restore() into the live state",
                            timed(lambda: ckpt.restore(state), reps, device=device),
                            f"{ckpt._pipelined} tensors copied while the rest was read")
            r.row("  of which: read + verify into the arena alone",
                  timed(lambda: ckpt._ckpt.restore(allocate=ckpt._allocate), reps,
                        device=device))
            pinned = ckpt.staging_pinned
            print(f"  arena {ckpt.staging_bytes / 2**20:.0f} MiB, pinned={pinned}")
        threads = os.cpu_count() or 8
        if threads != 8:  # the engine's default: one I/O thread per CPU, at most 8
            with strata.torch.Checkpointer(os.path.join(scratch, "strata"),
                                           io_threads=threads) as more:
                more.restore(state)  # allocates its arena
                r.row(f"strata.torch restore(), {threads} I/O threads",
                      timed(lambda: more.restore(state), reps, device=device))
                r.row(f"  of which: read + verify, {threads} I/O threads",
                      timed(lambda: more._ckpt.restore(allocate=more._allocate), reps,
                            device=device))
        r.ratio("strata_save_blocking_vs_pinned_d2h", blocking / lim_d2h, "<= 1.25")
        r.ratio("strata_save_overlapped_vs_pinned_d2h", overlapped / lim_d2h, "<= 0.2")
        r.ratio("strata_overlapped_step_cost_vs_pinned_d2h", overlap_cost / lim_d2h, "<= 0.2")
        r.ratio("strata_restore_vs_pinned_h2d", restore / lim_h2d, "<= 2.0")

        if "torch" not in skip:
            print("\n[torch]")
            path = os.path.join(scratch, "state.pt")
            sd = {"model": model.state_dict(), "optimizer": opt.state_dict()}
            save = r.row("torch.save", timed(lambda: torch.save(sd, path), reps, device=device))

            def load():
                loaded = torch.load(path, weights_only=True, map_location=device)
                model.load_state_dict(loaded["model"])
                opt.load_state_dict(loaded["optimizer"])

            load_s = r.row("torch.load(weights_only=True) + load_state_dict",
                           timed(load, reps, device=device))
            os.remove(path)
            r.ratio("torch_save_over_strata_blocking", save / blocking, ">= 5")
            r.ratio("torch_load_over_strata_restore", load_s / restore, ">= 1.5")

        if "dcp" not in skip:
            dcp_bench(r, model, opt, scratch, reps, device, blocking, restore)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print("\n| measure | ms | GB/s |\n|---|---|---|")
    for name, seconds, _ in r.rows:
        print(f"| {name} | {seconds * 1e3:.2f} | {nbytes / seconds / 1e9:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "gpu": gpu, "nbytes": nbytes, "torch": torch.__version__,
                       "rows": r.rows, "ratios": r.ratios}, f, indent=1)
    return 0


def overlapped_step_cost(r, ckpt, state, model, opt, lim_d2h, reps, device, steps):
    """What an overlapped save adds to one training step (forward, backward,
    optimizer step; the step waits for the copies through strata.torch's
    pre-step hook) whose forward/backward takes at least as long as the
    pinned copy: the step with a save minus the step without. The batch is
    doubled until the forward/backward outlasts the copy (GPU only)."""
    width = model[0].in_features
    batch = 64

    def train_step():
        x = torch.randn(batch, width, device=device)
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def fwd_bwd():
        x = torch.randn(batch, width, device=device)
        model(x).square().mean().backward()
        opt.zero_grad(set_to_none=True)

    forward_backward = timed(fwd_bwd, 2, device=device)
    while device.startswith("cuda") and forward_backward < 1.2 * lim_d2h and batch < 1 << 16:
        batch *= 2
        forward_backward = timed(fwd_bwd, 2, device=device)
    r.row(f"forward+backward alone (batch {batch})", forward_backward)
    plain = r.row("training step alone", timed(train_step, reps, device=device))

    def saved_step():
        ckpt.save(next(steps), state, overlap=True)
        train_step()

    with_save = r.row("save(overlap=True) + training step",
                      timed(saved_step, reps, before=ckpt.wait, device=device))
    return r.row("  what the overlapped save adds to the step", max(with_save - plain, 1e-9),
                 "target <= 0.2x the pinned copy")


def dcp_bench(r, model, opt, scratch, reps, device, blocking, restore):
    """DCP's async_save without a process group (single process, as DCP
    allows when torch.distributed is not initialized)."""
    try:
        import torch.distributed.checkpoint as dcp
    except ImportError as e:
        print(f"  dcp: not available ({e})")
        return
    print("\n[dcp]")
    sd = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    warnings.filterwarnings("ignore")
    n = iter(range(100000))
    pinned = None

    def run_async(checkpoint_id=lambda i: os.path.join(scratch, f"dcp{i}"), state=sd,
                  stager_factory=None, **kw):
        futures = []

        def one():
            if stager_factory is not None:
                kw["async_stager"] = stager_factory()
            futures.append(dcp.async_save(state, checkpoint_id=checkpoint_id(next(n)), **kw))

        def drain():
            while futures:
                futures.pop().result()

        t = timed(one, reps, before=drain, device="cpu")
        drain()
        return t

    try:
        default = r.row("dcp.async_save (default stager)", run_async())
        r.ratio("dcp_async_save_over_strata_blocking", default / blocking, ">= 1")
    except Exception as e:  # noqa: BLE001 - report and go on: DCP's API moves
        print(f"  dcp.async_save: {type(e).__name__}: {e}")
    try:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

        def pinned_stager():
            return DefaultStager(StagingOptions(use_pinned_memory=device.startswith("cuda"),
                                                use_shared_memory=False, use_async_staging=False,
                                                use_non_blocking_copy=device.startswith("cuda")))
        stager = pinned_stager()
        try:
            # One stager for every save: its pinned buffers are made once and reused.
            pinned = r.row("dcp.async_save (DefaultStager, pinned)",
                           run_async(async_stager=stager))
        except Exception as e:  # noqa: BLE001 - torch releases that close a caller's
            # stager after each save (its deepcopy table emptied: "KeyError: <class 'type'>"
            # on the next) need a new stager, and new pinned buffers, per save
            print(f"  dcp pinned stager, reused: {type(e).__name__}: {e}; "
                  "again with a new stager per save")
            pinned = r.row("dcp.async_save (DefaultStager, pinned; a new stager per save)",
                           run_async(stager_factory=pinned_stager))
        r.ratio("dcp_pinned_async_save_over_strata_blocking", pinned / blocking, ">= 1")
        stager.close()
    except Exception as e:  # noqa: BLE001
        print(f"  dcp pinned stager: {type(e).__name__}: {e}")
        traceback.print_exc(limit=-4, file=sys.stdout)
    try:
        strata_dcp_bench(r, sd, model, opt, scratch, reps, device, run_async, pinned)
    except Exception as e:  # noqa: BLE001
        print(f"  dcp through strata: {type(e).__name__}: {e}")
    try:
        last = os.path.join(scratch, "dcp-load")
        dcp.save(sd, checkpoint_id=last)

        def load():
            target = {"model": model.state_dict(), "optimizer": opt.state_dict()}
            dcp.load(target, checkpoint_id=last)
            model.load_state_dict(target["model"])
            opt.load_state_dict(target["optimizer"])

        load_s = r.row("dcp.load + load_state_dict", timed(load, reps, device=device))
        r.ratio("dcp_load_over_strata_restore", load_s / restore, ">= 1")
    except Exception as e:  # noqa: BLE001
        print(f"  dcp.load: {type(e).__name__}: {e}")


def strata_dcp_bench(r, sd, model, opt, scratch, reps, device, run_async, pinned):
    """DCP's async_save and load with Strata's StorageWriter (its own stager:
    strata.torch's pinned arena) and StorageReader, in local mode (no
    agent)."""
    import torch.distributed.checkpoint as dcp
    from strata.dcp import StrataSavePlanner, StrataStorageReader, StrataStorageWriter

    directory = os.path.join(scratch, "strata-dcp")
    writer = StrataStorageWriter(directory)
    try:
        t = r.row("dcp.async_save through Strata (StrataStorageWriter)",
                  run_async(checkpoint_id=lambda i: i, storage_writer=writer,
                            planner=StrataSavePlanner()))
    finally:
        writer.close()
    if pinned:
        r.ratio("strata_dcp_async_save_vs_dcp_pinned_async_save", t / pinned, "<= 1")

    def load():
        target = {"model": model.state_dict(), "optimizer": opt.state_dict()}
        dcp.load(target, storage_reader=StrataStorageReader(directory))
        model.load_state_dict(target["model"])
        opt.load_state_dict(target["optimizer"])

    r.row("dcp.load through Strata (StrataStorageReader)", timed(load, reps, device=device))


if __name__ == "__main__":
    sys.exit(main())
