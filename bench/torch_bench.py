#!/usr/bin/env python3
"""PyTorch benchmarks: strata.torch against torch.save / torch.load, in the
same run, on the same tmpfs, for the same state_dict.

  torch_save_blocking  torch.save() time / time the training loop is blocked
                       in strata.torch's async save() (target >= 5)
  torch_load           torch.load(weights_only=True) time / strata.torch
                       restore() time (target >= 1.5)
  torch_per_tensor     the Python time per tensor of a save and of a restore
                       of a model + AdamW state of 2,000 small tensors (the
                       copies are bytes; what is timed is the per-tensor work
                       around them), in microseconds, with and without the
                       state_dict() / load_state_dict() calls of torch itself,
                       each sample paired with one of torch's part timed right
                       after it (target <= 5 us for Strata's own part)
  torch_per_tensor_cuda the same with the model and AdamW's moments on the
                       first CUDA device (the step counters on the CPU, as
                       AdamW keeps them): the per-tensor work of the GPU
                       path. Needs CUDA; without a GPU scripts/bench.sh runs
                       it on the emulated runtime (tests/harness/
                       emulated_cudart.cc, no delay), whose copies cost
                       host time a device's do not (the figure is an upper
                       bound on the Python part there)
  dcp_per_tensor       the same 2,000-tensor state through DCP (dcp.save and
                       dcp.load, one process): strata.dcp's writer and
                       reader against DCP's own file system ones on the
                       same tmpfs, one after the other, in microseconds per
                       tensor, the mean over many saves and loads with
                       Python's collector running as in a training process
                       (a collection of the oldest generation, which walks
                       every object of the process, is counted and paid
                       where it starts); target <= 1x DCP's own. And
                       stage() (what dcp.async_save runs on the training
                       thread) in microseconds per tensor; target <= 5

Both restores produce the same thing: new CPU tensors holding the state
(Strata's also verified against the checksums). Prints the same
`ratio <name> <value> target <t>` lines as the C++ benchmarks.

Usage: torch_bench.py [--size-mib N] [--reps N] [--tmpfs DIR] [names...]
Environment: STRATA_BENCH_SIZE_MIB, STRATA_BENCH_REPS, STRATA_BENCH_TMPFS.
"""

import argparse
import gc
import os
import shutil
import statistics
import sys
import time

import torch

import strata.torch

BENCHMARKS = ("torch_save_blocking", "torch_load", "torch_per_tensor", "torch_per_tensor_cuda",
              "dcp_per_tensor")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size-mib", type=int,
                   default=int(os.environ.get("STRATA_BENCH_SIZE_MIB", 512)))
    p.add_argument("--reps", type=int, default=int(os.environ.get("STRATA_BENCH_REPS", 5)))
    p.add_argument("--tmpfs", default=os.environ.get("STRATA_BENCH_TMPFS", "/dev/shm"))
    p.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of {BENCHMARKS})")
    args = p.parse_args()
    for n in args.names:
        if n not in BENCHMARKS:
            p.error(f"unknown benchmark {n!r}")
    return args


def make_state(size_mib: int) -> dict:
    """A transformer-like state_dict: 32 MiB weight matrices plus small
    biases and norms, float32, `size_mib` MiB in all."""
    g = torch.Generator().manual_seed(1)
    state, total, i = {}, 0, 0
    while total < size_mib << 20:
        state[f"layers.{i}.weight"] = torch.randn(2048, 4096, generator=g)
        state[f"layers.{i}.bias"] = torch.randn(4096, generator=g)
        total += (32 << 20) + 4096 * 4
        i += 1
    return state


def timed(fn, reps: int, before=None):
    samples = []
    for _ in range(reps):
        if before:
            before()
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def report(label: str, samples, nbytes: int) -> float:
    med = statistics.median(samples)
    rate = nbytes / med
    rate_text = f"{rate / 1e9:6.2f} GB/s" if rate >= 1e9 else f"{rate / 1e6:6.1f} MB/s"
    print(f"  {label:<40} {med * 1e3:9.2f} ms  (min {min(samples) * 1e3:8.2f}, "
          f"max {max(samples) * 1e3:8.2f})  {rate_text}")
    return med


def ratio(name: str, value: float, target: float) -> None:
    print(f"  target: >= {target:g} -> {'met' if value >= target else 'NOT met'}")
    print(f"ratio {name} {value:.3f} target {target:g}", flush=True)


def bench_save(state, nbytes, scratch, reps) -> None:
    print("\n[torch_save_blocking] torch.save() vs the time the loop is blocked in an async "
          "strata.torch save()")
    path = os.path.join(scratch, "state.pt")
    torch_s = timed(lambda: torch.save(state, path), reps,
                    before=lambda: os.path.exists(path) and os.remove(path))
    base = report("torch.save to tmpfs", torch_s, nbytes)
    os.remove(path)

    with strata.torch.Checkpointer(os.path.join(scratch, "strata")) as ckpt:
        ckpt.save(0, {"state": state})  # first save: allocates the staging memory
        ckpt.wait()
        step = iter(range(1, reps + 1))
        blocked = timed(lambda: ckpt.save(next(step), {"state": state}), reps, before=ckpt.wait)
        background = timed(ckpt.wait, 1)
    ours = report("strata.torch save(), blocked part", blocked, nbytes)
    report("  then committed in the background", background, nbytes)
    ratio("torch_save_blocking", base / ours, 5)


def bench_load(state, nbytes, scratch, reps) -> None:
    print("\n[torch_load] torch.load() vs a verified strata.torch restore(), both into new "
          "tensors")
    path = os.path.join(scratch, "state.pt")
    torch.save(state, path)
    loaded = {}

    def torch_load():  # weights_only=True is the default from torch 2.6; said explicitly
        loaded["t"] = torch.load(path, weights_only=True)

    base = report("torch.load from tmpfs", timed(torch_load, reps), nbytes)
    with strata.torch.Checkpointer(os.path.join(scratch, "strata"), async_save=False) as ckpt:
        ckpt.save(1, {"state": state})

        def strata_load():
            target = {"state": None}
            ckpt.restore(target)
            loaded["s"] = target["state"]

        ours = report("strata.torch restore()", timed(strata_load, reps), nbytes)
    for k, t in state.items():  # the benchmark also proves the restore right
        assert torch.equal(loaded["s"][k], t) and torch.equal(loaded["t"][k], t), k
    ratio("torch_load", base / ours, 1.5)


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.proj = torch.nn.Linear(16, 16)


def per_tensor_state(device: str):
    """125 blocks of 4 parameters (500 tensors) and AdamW's two moments and
    step counter for each (1,500), on `device`: made on the CPU and moved
    (no kernel runs, so the emulated runtime can hold it too)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[_Block() for _ in range(125)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    if device != "cpu":
        moments = opt.state_dict()
        model.to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        opt.load_state_dict(moments)  # moments to the parameters' device, steps on the CPU
    return model, opt


def bench_per_tensor(scratch, reps, device="cpu") -> None:
    """2,000 tensors: per_tensor_state()'s."""
    suffix = "" if device == "cpu" else "_cuda"
    if device != "cpu" and not torch.cuda.is_available():
        print(f"\n[torch_per_tensor{suffix}] no CUDA device: nothing measured")
        return
    where = "CPU" if device == "cpu" else torch.cuda.get_device_name(device)
    print(f"\n[torch_per_tensor{suffix}] Python time per tensor of a save and a restore, "
          f"2,000 tensors, on {where}")
    model, opt = per_tensor_state(device)
    state = {"model": model, "optimizer": opt}
    n = len(model.state_dict()) + sum(len(s) for s in opt.state.values())
    assert n == 2000, n
    samples = max(reps, 9)

    def torch_sd():
        return model.state_dict(), opt.state_dict()

    def torch_load():
        model.load_state_dict(model.state_dict())
        opt.load_state_dict(opt.state_dict())

    # Each sample of Strata's call is paired with one of torch's own part
    # timed right after it: torch's own load_state_dict() moves by 2x from
    # run to run, and a median of each taken apart would subtract one run's
    # torch from another's. Python's garbage collector runs before each
    # part: a collection starts every few hundred new containers, and
    # without it each part would pay for the other's (a restore that makes
    # fewer objects moved collections into torch's part, and its own
    # figure looked better than it was).
    def paired(fn, own, before=None):
        def ready():
            if before:
                before()
            gc.collect()

        pairs = []
        for _ in range(samples):
            ours = timed(fn, 1, before=ready)[0]
            pairs.append((ours, timed(own, 1, before=ready)[0]))
        return (statistics.median(o for o, _ in pairs),
                statistics.median(o - t for o, t in pairs),
                statistics.median(t for _, t in pairs))

    with strata.torch.Checkpointer(os.path.join(scratch, "strata"), max_to_keep=2) as ckpt:
        steps = iter(range(1, 10 * samples + 10))
        ckpt.save(0, state)
        ckpt.wait()
        save = paired(lambda: ckpt.save(next(steps), state), torch_sd, before=ckpt.wait)
        ckpt.wait()
        # A restore calls state_dict() once and load_state_dict() once, as
        # torch_load does.
        restore = paired(lambda: ckpt.restore(state), torch_load)

    def line(what, timing):
        seconds, beyond, torch_part = timing
        print(f"  {what:<10} {seconds / n * 1e6:7.2f} us/tensor in all, "
              f"{beyond / n * 1e6:7.2f} us/tensor without torch's own "
              f"{torch_part / n * 1e6:5.2f}")
        return beyond / n * 1e6

    save_us = line("save()", save)
    restore_us = line("restore()", restore)
    print(f"ratio torch_save_python_us_per_tensor{suffix} {save_us:.3f} target <= 5", flush=True)
    print(f"ratio torch_restore_python_us_per_tensor{suffix} {restore_us:.3f} target <= 5",
          flush=True)


def bench_dcp_per_tensor(scratch, reps) -> None:
    """per_tensor_state()'s 2,000 tensors through dcp.save and dcp.load."""
    import warnings

    import torch.distributed.checkpoint as dcp
    from strata.dcp import StrataStorageReader, StrataStorageWriter
    warnings.filterwarnings("ignore")  # DCP warns that no process group is initialized
    model, opt = per_tensor_state("cpu")
    n = 2000
    ops = max(reps, 5) * 4
    print(f"\n[dcp_per_tensor] dcp.save and dcp.load of 2,000 tensors, the mean of {ops} each, "
          f"the collector running ({len(gc.get_objects())} objects in the process)")
    full = {"op": None}
    counts = {}

    def on_collection(phase, info):
        if phase == "start" and info["generation"] == 2 and full["op"] is not None:
            counts[full["op"]] = counts.get(full["op"], 0) + 1

    def state():
        return {"model": model.state_dict(), "optimizer": opt.state_dict()}

    ours_dir, own = os.path.join(scratch, "strata-dcp"), os.path.join(scratch, "dcp-own")
    writer = StrataStorageWriter(ours_dir, max_to_keep=2)

    def strata_save(i):
        dcp.save(state(), storage_writer=writer, checkpoint_id=i + 1)

    def own_save(i):
        dcp.save(state(), checkpoint_id=os.path.join(own, str(i % 2)))

    def strata_load(i):
        dcp.load(state(), storage_reader=StrataStorageReader(ours_dir))

    def own_load(i):
        dcp.load(state(), checkpoint_id=os.path.join(own, "0"))

    pairs = (("dcp.save", strata_save, own_save), ("dcp.load", strata_load, own_load))
    spent = {}
    gc.callbacks.append(on_collection)
    try:
        for what, ours, theirs in pairs:
            for label, fn in ((f"{what} Strata", ours), (f"{what} DCP's own", theirs)):
                gc.collect()  # neither pays for what the other left
                full["op"] = label
                start = time.perf_counter()
                for i in range(ops):
                    fn(i)
                spent[label] = time.perf_counter() - start
                full["op"] = None
    finally:
        gc.callbacks.remove(on_collection)
        writer.close()
    for what, _, _ in pairs:
        us = {who: spent[f"{what} {who}"] / ops / n * 1e6 for who in ("Strata", "DCP's own")}
        ours, theirs = us["Strata"], us["DCP's own"]
        for who, value in us.items():
            print(f"  {what} {who:<10} {value:7.2f} us/tensor, "
                  f"{counts.get(f'{what} {who}', 0) / ops:4.2f} full collections per call")
        name = what.replace(".", "_")
        print(f"ratio {name}_python_vs_dcp_own {ours / theirs:.3f} target <= 1", flush=True)
    stage_dcp_state(state, ops, n)


def stage_dcp_state(state, ops: int, n: int) -> None:
    """What dcp.async_save spends on the training thread in StrataStorageWriter.stage()
    (strata.torch.stage_state_dict: every tensor into the pinned arena), per tensor, for a
    fresh state_dict() of the same model each time, as a training loop hands it over (made
    outside the timing)."""
    samples = []
    for _ in range(ops):
        sd = state()
        start = time.perf_counter()
        strata.torch.stage_state_dict(sd)
        samples.append(time.perf_counter() - start)
    strata.torch.release_staged()
    us = statistics.median(samples) / n * 1e6
    print(f"  stage()    {us:7.2f} us/tensor (the copies of 2,000 small CPU tensors included)")
    print(f"ratio dcp_stage_python_us_per_tensor {us:.3f} target <= 5", flush=True)


def main() -> int:
    args = parse_args()
    names = args.names or list(BENCHMARKS)
    torch.set_num_threads(1)
    big = {"torch_save_blocking", "torch_load"} & set(names)
    state = make_state(args.size_mib) if big else {}
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    print(f"== torch_bench: {nbytes / 2**20:.0f} MiB state_dict in {len(state)} tensors, "
          f"torch {torch.__version__}, strata {strata.__version__}, {args.reps} reps "
          f"(median), scratch {args.tmpfs}")
    scratch = os.path.join(args.tmpfs, f"strata-bench-torch-{os.getpid()}")  # bench.sh
    os.mkdir(scratch)  # removes it if this process dies
    try:
        if "torch_save_blocking" in names:
            bench_save(state, nbytes, scratch, args.reps)
            shutil.rmtree(scratch)
            os.mkdir(scratch)
        if "torch_load" in names:
            bench_load(state, nbytes, scratch, args.reps)
            shutil.rmtree(scratch)
            os.mkdir(scratch)
        if "torch_per_tensor" in names:
            bench_per_tensor(scratch, args.reps)
        if "torch_per_tensor_cuda" in names:
            shutil.rmtree(scratch)
            os.mkdir(scratch)
            bench_per_tensor(scratch, args.reps, device="cuda")
        if "dcp_per_tensor" in names:
            shutil.rmtree(scratch)
            os.mkdir(scratch)
            bench_dcp_per_tensor(scratch, args.reps)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
