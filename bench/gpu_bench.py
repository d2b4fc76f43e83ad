#!/usr/bin/env python3
"""How long checkpointing a training state blocks the loop, against the copy
limits of the machine, in one run, for two states:

  linear       an nn.Sequential of big Linear layers (float32) with AdamW:
               a few dozen big tensors
  transformer  a transformer-like model in bf16 -- per layer a fused QKV, an
               output projection and an MLP with biases, two LayerNorms --
               with AdamW: ~1,000 tensors (243 parameters: 729 on the device,
               243 `step` counters on the CPU), most of them small

Each is about `--size-mib` MiB on `--device` (default: cuda when present,
else cpu). Every figure is a median of `--reps`, each ratio against the same
run's pinned copy of the same state:

  limits     pinned device->host / host->device copy of the whole state into /
             from one page-locked buffer (the floor of a save's and a
             restore's copy)
  strata     strata.torch: blocking save (warm; and the first of a fresh job,
             with its memory reserved ahead as restore() or the first
             optimizer step does, and with nothing reserved); save(overlap=True)
             (until it returns, and what it adds to a training step whose
             forward+backward outlasts the copy); save -> committed on the RAM
             disk; restore into the live model and optimizer, in the process
             that saved and after a restart (a checkpointer opened anew, the
             step files not page-locked)
  dcp        dcp.async_save, a synchronous dcp.save (until committed) and
             dcp.load through Strata (StrataStorageWriter,
             StrataStorageReader); DCP's own dcp.load and torch.load +
             load_state_dict as baselines

Prints `ratio <name> <value> target <t>` lines and a table per state. On CPU
the copy "limits" are memcpy into / from a preallocated buffer.

Usage: gpu_bench.py [--size-mib N] [--reps N] [--tmpfs DIR] [--device cpu|cuda]
                    [--states linear,transformer] [--skip torch,dcp] [--json FILE]
                    [--profile FILE]

--profile appends to FILE, for each row a target is set for, a cProfile of
one more call after the timed ones: the Python functions by own time and by
cumulative time (where a GPU row's time goes, in one file).
"""

import argparse
import cProfile
import io
import json
import math
import os
import pstats
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
    p.add_argument("--size-mib", type=int, default=6144 if cuda else 256)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--tmpfs", default="/dev/shm" if os.path.isdir("/dev/shm") else "/tmp")
    p.add_argument("--device", default="cuda" if cuda else "cpu")
    p.add_argument("--states", default="linear,transformer")
    p.add_argument("--json", default="", help="also write the results here")
    p.add_argument("--skip", default="", help="comma-separated groups to skip: torch,dcp")
    p.add_argument("--profile", default="", help="append a cProfile of each target row here")
    return p.parse_args()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# ---- the states ----------------------------------------------------------------

class Block(nn.Module):
    """A transformer layer's parameters (12 tensors) and a forward that uses
    them all: enough matrix work to time an overlapped save against."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.ln1(h)).chunk(3, dim=-1)
        h = h + self.out(torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1) @ v)
        return h + self.down(nn.functional.gelu(self.up(self.ln2(h))))


class Transformer(nn.Module):
    def __init__(self, d: int, layers: int, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.norm = nn.Parameter(torch.ones(d))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.embed(idx)
        for b in self.blocks:
            h = b(h)
        return h * self.norm


def make_linear(size_mib: int, device: str):
    """Linear layers of width w in float32; AdamW state triples the bytes."""
    width = 4096 if size_mib >= 1024 else 1024
    layers = max(2, (size_mib << 20) // ((width * width + width) * 4 * 3))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)]).to(device)

    def batch(n):
        return (torch.randn(n, width, device=device),)
    return model, batch


def make_transformer(size_mib: int, device: str):
    """20 layers and an embedding in bf16, d chosen so that the parameters and
    AdamW's two moments make `size_mib` MiB: 243 parameters."""
    layers, vocab = 20, 32000
    # bytes = 3 moments-and-params x 2 bytes x (layers x 12 d^2 + vocab x d), about
    d = int((-(vocab) + math.sqrt(vocab ** 2 + 4 * 12 * layers * (size_mib << 20) / 6))
            / (2 * 12 * layers))
    d = max(64, d // 64 * 64)
    torch.manual_seed(0)
    model = Transformer(d, layers, vocab).to(device=device, dtype=torch.bfloat16)

    def batch(n):
        return (torch.randint(0, vocab, (max(1, n // 64), 64), device=device),)
    return model, batch


def make_state(kind: str, size_mib: int, device: str):
    model, batch = (make_linear if kind == "linear" else make_transformer)(size_mib, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()  # creates exp_avg, exp_avg_sq and the CPU step counters
    opt.zero_grad(set_to_none=True)
    sync(device)
    return model, opt, batch


def tensors_of(model, opt):
    out = list(model.state_dict().values())
    for s in opt.state.values():
        out += [v for v in s.values() if torch.is_tensor(v)]
    return out


# ---- measuring -----------------------------------------------------------------------

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
    def __init__(self, kind, nbytes, profile="", device="cpu"):
        self.kind, self.nbytes, self.rows, self.ratios = kind, nbytes, [], []
        self.profile_path, self.device = profile, device

    def profile(self, name, fn, before=None):
        """With --profile, one more call of `fn` (after `before`) under
        cProfile, its top functions appended to the profile file."""
        if not self.profile_path:
            return
        if before:
            before()
        sync(self.device)
        prof = cProfile.Profile()
        start = time.perf_counter()
        prof.enable()
        fn()
        sync(self.device)
        prof.disable()
        took = time.perf_counter() - start
        out = io.StringIO()
        for order in ("tottime", "cumulative"):
            pstats.Stats(prof, stream=out).sort_stats(order).print_stats(30)
        with open(self.profile_path, "a") as f:
            f.write(f"\n#### {self.kind}: {name} ({took * 1e3:.1f} ms profiled, "
                    f"{self.nbytes / 2**20:.0f} MiB)\n{out.getvalue()}")

    def row(self, name, seconds, note=""):
        self.rows.append((name, seconds, note))
        print(f"  {name:<52} {seconds * 1e3:10.2f} ms  {self.nbytes / seconds / 1e9:7.2f} GB/s"
              f"  {note}", flush=True)
        return seconds

    def ratio(self, name, value, target):
        self.ratios.append((f"{self.kind}_{name}", value, target))
        print(f"ratio {self.kind}_{name} {value:.3f} target {target}", flush=True)


def limits(r, ts, reps, device):
    cuda = device.startswith("cuda")
    nbytes = sum(t.numel() * t.element_size() for t in ts)
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

    print("[limits]")
    d2h_s = r.row("pinned D2H copy (one buffer)" if cuda else "memcpy into a buffer",
                  timed(d2h, reps, device=device))
    h2d_s = r.row("pinned H2D copy (one buffer)" if cuda else "memcpy from a buffer",
                  timed(h2d, reps, device=device))
    return d2h_s, h2d_s


def await_reserved(ckpt) -> float:
    start = time.perf_counter()
    while ckpt._ckpt.staging["reserving"]:
        time.sleep(0.002)
    return time.perf_counter() - start


def first_saves(r, scratch, state, reps, device):
    """The first save of a fresh job, `reps` fresh jobs each: with the memory
    reserved ahead (restore() found nothing, so the first optimizer step
    reserved it; here reserve() itself, then its background work awaited),
    and with nothing reserved."""
    reserved, unreserved, setup = [], [], []
    for i in range(reps):
        for ahead in (True, False):
            path = os.path.join(scratch, f"fresh-{i}-{int(ahead)}")
            with strata.torch.Checkpointer(path) as ckpt:
                if ahead:
                    start = time.perf_counter()
                    ckpt.reserve(state)
                    await_reserved(ckpt)
                    setup.append(time.perf_counter() - start)
                sync(device)
                start = time.perf_counter()
                ckpt.save(1, state)
                sync(device)
                (reserved if ahead else unreserved).append(time.perf_counter() - start)
            shutil.rmtree(path, ignore_errors=True)
    r.row("  reserving ahead (background, off the loop)", statistics.median(setup))
    first = r.row("strata.torch save() blocking, first, reserved ahead",
                  statistics.median(reserved))
    r.row("strata.torch save() blocking, first, nothing reserved",
          statistics.median(unreserved))
    return first


def strata_rows(r, scratch, kind, model, opt, batch, lim_d2h, lim_h2d, reps, device):
    state = {"model": model, "optimizer": opt}
    print("[strata]")
    first = first_saves(r, scratch, state, reps, device)
    with strata.torch.Checkpointer(os.path.join(scratch, "strata")) as ckpt:
        ckpt.reserve(state)
        await_reserved(ckpt)
        for s in range(3):  # every slot made and recycled once
            ckpt.save(s, state)
            ckpt.wait()
        steps = iter(range(10, 100 * reps))
        blocking = r.row("strata.torch save() blocking, warm",
                         timed(lambda: ckpt.save(next(steps), state), reps,
                               before=ckpt.wait, device="cpu"))
        r.profile("blocking save, warm", lambda: ckpt.save(next(steps), state), ckpt.wait)
        ckpt.wait()
        committed = r.row("save -> committed on the RAM disk",
                          timed(lambda: (ckpt.save(next(steps), state), ckpt.wait()), reps,
                                before=ckpt.wait, device="cpu"))
        r.profile("save -> committed", lambda: (ckpt.save(next(steps), state), ckpt.wait()),
                  ckpt.wait)
        overlapped = r.row("strata.torch save(overlap=True) returns",
                           timed(lambda: ckpt.save(next(steps), state, overlap=True), reps,
                                 before=ckpt.wait, device="cpu"))
        r.profile("save(overlap=True) returns",
                  lambda: ckpt.save(next(steps), state, overlap=True), ckpt.wait)
        ckpt.wait()
        adds = overlapped_step_cost(r, ckpt, state, model, opt, batch, lim_d2h, reps, device,
                                    steps)
        ckpt.wait()
        restore = r.row("strata.torch restore() into the live state",
                        timed(lambda: ckpt.restore(state), reps, device=device),
                        f"{ckpt._pipelined} tensors copied by the stager")
        r.profile("restore() into the live state", lambda: ckpt.restore(state))
        staging = ckpt._ckpt.staging
        print(f"  host memory held: {staging['bytes'] / 2**20:.0f} MiB, "
              f"pinned={staging['pinned']}, steps kept 2")
    restarted = restart_restores(r, os.path.join(scratch, "strata"), state, reps, device)
    r.profile("restore() after a restart (opening included)",
              lambda: restart_restores(None, os.path.join(scratch, "strata"), state, 1, device))
    r.ratio("save_blocking_warm_vs_d2h", blocking / lim_d2h, "<= 1.1")
    r.ratio("save_blocking_first_vs_d2h", first / lim_d2h, "<= 1.25")
    r.ratio("save_overlapped_returns_vs_d2h", overlapped / lim_d2h, "<= 0.1")
    r.ratio("save_overlapped_adds_vs_d2h", adds / lim_d2h, "<= 0.1")
    r.ratio("save_to_committed_vs_d2h", committed / lim_d2h, "<= 2")
    r.ratio("restore_vs_h2d", restore / lim_h2d, "<= 1.5")
    r.ratio("restore_after_restart_vs_h2d", restarted / lim_h2d, "<= 1.5")
    return restore


def restart_restores(r, path, state, reps, device):
    """restore() as a restarted job makes it: the first of a checkpointer
    opened anew over the directory, whose step files no process has
    page-locked (they are copied through page-locked chunks). With `r`
    None, only runs them (to be profiled)."""
    times = []
    for _ in range(reps):
        with strata.torch.Checkpointer(path) as ckpt:
            sync(device)
            start = time.perf_counter()
            ckpt.restore(state)
            sync(device)
            times.append(time.perf_counter() - start)
    if r is None:
        return None
    return r.row("strata.torch restore() after a restart",
                 statistics.median(times))


def overlapped_step_cost(r, ckpt, state, model, opt, batch, lim_d2h, reps, device, steps):
    """What an overlapped save adds to one training step (forward, backward,
    optimizer step; the step waits for the copies through strata.torch's
    pre-step hook) whose forward+backward takes at least as long as the
    pinned copy: the step with a save minus the step without. The batch is
    doubled until the forward+backward outlasts the copy (GPU only)."""
    n = 64

    def fwd_bwd():
        model(*batch(n)).float().square().mean().backward()
        opt.zero_grad(set_to_none=True)

    def train_step():
        model(*batch(n)).float().square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    forward_backward = timed(fwd_bwd, 2, device=device)
    while device.startswith("cuda") and forward_backward < 1.2 * lim_d2h and n < 1 << 16:
        n *= 2
        forward_backward = timed(fwd_bwd, 2, device=device)
    r.row(f"forward+backward alone (batch {n})", forward_backward)
    plain = r.row("training step alone", timed(train_step, reps, device=device))

    def saved_step():
        ckpt.save(next(steps), state, overlap=True)
        train_step()

    with_save = r.row("save(overlap=True) + training step",
                      timed(saved_step, reps, before=ckpt.wait, device=device))
    return r.row("  what the overlapped save adds to the step", max(with_save - plain, 1e-9))


def torch_rows(r, scratch, model, opt, reps, device, restore):
    print("[torch]")
    path = os.path.join(scratch, "state.pt")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path)

    def load():
        loaded = torch.load(path, weights_only=True, map_location=device)
        model.load_state_dict(loaded["model"])
        opt.load_state_dict(loaded["optimizer"])

    load_s = r.row("torch.load(weights_only=True) + load_state_dict",
                   timed(load, reps, device=device))
    os.remove(path)
    r.ratio("torch_load_over_strata_restore", load_s / restore, ">= 1.5")


def dcp_rows(r, scratch, model, opt, reps, device, lim_d2h, lim_h2d):
    """DCP without a process group (one process, as DCP allows when
    torch.distributed is not initialized), through Strata and alone."""
    import torch.distributed.checkpoint as dcp
    from strata.dcp import StrataStorageReader, StrataStorageWriter
    print("[dcp]")
    warnings.filterwarnings("ignore")
    directory = os.path.join(scratch, "strata-dcp")
    writer = StrataStorageWriter(directory)
    futures = []
    steps = iter(range(1, 100 * reps))

    def drain():
        while futures:
            futures.pop().result()

    def save():
        futures.append(dcp.async_save({"model": model.state_dict(), "optimizer": opt.state_dict()},
                                      storage_writer=writer, checkpoint_id=next(steps)))

    def save_now():  # TorchTitan's async_mode "disabled", and its on-demand step
        dcp.save({"model": model.state_dict(), "optimizer": opt.state_dict()},
                 storage_writer=writer, checkpoint_id=next(steps))

    try:
        save()
        drain()
        t = r.row("dcp.async_save through Strata returns", timed(save, reps, before=drain))
        r.profile("dcp.async_save returns", save, drain)
        drain()
        sync_s = r.row("dcp.save (synchronous) through Strata, committed",
                       timed(save_now, reps, device=device))
    finally:
        writer.close()
    r.ratio("dcp_async_save_vs_d2h", t / lim_d2h, "<= 1.1")
    r.ratio("dcp_save_sync_vs_d2h", sync_s / lim_d2h, "report")

    def strata_load():
        target = {"model": model.state_dict(), "optimizer": opt.state_dict()}
        dcp.load(target, storage_reader=StrataStorageReader(directory))
        model.load_state_dict(target["model"])
        opt.load_state_dict(target["optimizer"])

    load_s = r.row("dcp.load through Strata (StrataStorageReader)",
                   timed(strata_load, reps, device=device))
    r.profile("dcp.load through Strata", strata_load)
    r.ratio("dcp_load_vs_h2d", load_s / lim_h2d, "<= 2")
    own = os.path.join(scratch, "dcp-own")
    dcp.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, checkpoint_id=own)

    def own_load():
        target = {"model": model.state_dict(), "optimizer": opt.state_dict()}
        dcp.load(target, checkpoint_id=own)
        model.load_state_dict(target["model"])
        opt.load_state_dict(target["optimizer"])

    r.row("DCP's own dcp.load (filesystem) + load_state_dict",
          timed(own_load, reps, device=device))


def bench_state(args, kind, scratch, results):
    device, reps = args.device, args.reps
    skip = set(filter(None, args.skip.split(",")))
    model, opt, batch = make_state(kind, args.size_mib, device)
    ts = tensors_of(model, opt)
    on_device = sum(1 for t in ts if t.device.type != "cpu")
    nbytes = sum(t.numel() * t.element_size() for t in ts)
    print(f"\n== {kind}: {nbytes / 2**20:.0f} MiB in {len(ts)} tensors ({on_device} on "
          f"{device}, {len(ts) - on_device} on the CPU)", flush=True)
    r = Results(kind, nbytes, args.profile, device)
    results.append(r)
    lim_d2h, lim_h2d = limits(r, ts, reps, device)
    restore = strata_rows(r, scratch, kind, model, opt, batch, lim_d2h, lim_h2d, reps, device)
    if "torch" not in skip:
        try:
            torch_rows(r, scratch, model, opt, reps, device, restore)
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"  torch: {type(e).__name__}: {e}")
    if "dcp" not in skip:
        try:
            dcp_rows(r, scratch, model, opt, reps, device, lim_d2h, lim_h2d)
        except Exception as e:  # noqa: BLE001 - report and go on: DCP's API moves
            print(f"  dcp: {type(e).__name__}: {e}")
            traceback.print_exc(limit=-4, file=sys.stdout)
    del model, opt, ts
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def file_system(path: str) -> str:
    """The type of the file system holding `path`, and for a tmpfs its
    huge= option (step files get huge pages with within_size or always)."""
    best, kind = "", "unknown"
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            dash = fields.index("-")
            point = fields[4].replace("\\040", " ")
            if path.startswith(point.rstrip("/") + "/") and len(point) >= len(best):
                best, kind = point, fields[dash + 1]
                if kind == "tmpfs":
                    options = dict(o.split("=", 1) if "=" in o else (o, "")
                                   for o in fields[dash + 3].split(","))
                    kind = f"tmpfs, huge={options.get('huge', 'never')}"
    return kind


def main() -> int:
    args = parse_args()
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else "none"
    where = file_system(os.path.realpath(args.tmpfs) + "/")
    print(f"== gpu_bench on {args.device} ({gpu}), torch {torch.__version__}, strata "
          f"{strata.__version__}, {args.reps} reps (median), scratch {args.tmpfs} ({where})",
          flush=True)
    scratch = os.path.join(args.tmpfs, f"strata-gpu-bench-{os.getpid()}")
    os.mkdir(scratch)
    results = []
    try:
        for kind in filter(None, args.states.split(",")):
            bench_state(args, kind, scratch, results)
            shutil.rmtree(scratch, ignore_errors=True)
            os.mkdir(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for r in results:
        print(f"\n| {r.kind} | ms | x limit |\n|---|---|---|")
        base = {"save": r.rows[0][1], "restore": r.rows[1][1]}
        for name, seconds, _ in r.rows:
            limit = base["restore"] if ("restore" in name or "load" in name) else base["save"]
            print(f"| {name} | {seconds * 1e3:.2f} | {seconds / limit:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "gpu": gpu, "torch": torch.__version__,
                       "scratch": f"{args.tmpfs} ({where})",
                       "states": {r.kind: {"nbytes": r.nbytes, "rows": r.rows,
                                           "ratios": r.ratios} for r in results}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
