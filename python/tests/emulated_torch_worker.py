"""One case of test_emulated_cuda.py's torch tests, in a fresh interpreter
whose CUDA is the emulated runtime (tests/harness/emulated_cudart.cc, two
devices), loaded under torch's own libcudart and as libcuda.so.1: torch's
CUDA tensors, caching allocators, streams and copies run on it, and so do
strata.torch and strata.dcp above them, unchanged. Kernels are not
emulated, so the state here is made and changed by copies only: tensors
made on the host and moved, and an optimizer (CopyAdam) whose step writes
new weights, moments and CPU step counters by copies, as AdamW changes
them.

Usage: emulated_torch_worker.py CASE DIRECTORY   (prints "ok" when it passes)
"""

import contextlib
import ctypes
import os
import sys
import threading

import torch
import torch.distributed.checkpoint as dcp
from torch import nn

import strata
import strata.dcp
import strata.torch
from test_torch_staging import await_reserved, data_files  # this file's folder is on the path

EMULATOR = ctypes.CDLL(os.environ["STRATA_CUDART"])
EMULATOR.strata_emulated_cuda_locked_bytes.restype = ctypes.c_size_t
EMULATOR.strata_emulated_cuda_pageable_copies.restype = ctypes.c_size_t


def locked_bytes():
    return EMULATOR.strata_emulated_cuda_locked_bytes()


HOST_FUNCTION = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_held = []  # the host functions' ctypes objects: alive while a stream may call them


def hold(streams, seconds=0.5):
    """Holds each stream's queue for `seconds` (a host function on it that
    waits), so work enqueued on it next is still queued when the code under
    test runs: code that does not order its copies after that work copies
    first and is overwritten. Returns the gate: set, it lets the streams go
    earlier."""
    gate = threading.Event()
    timer = threading.Timer(seconds, gate.set)
    timer.daemon = True  # a gate set early leaves nothing to wait for at exit
    timer.start()
    wait = HOST_FUNCTION(lambda _: gate.wait())
    _held.append(wait)
    for s in streams:
        with torch.cuda.device(s.device):
            err = EMULATOR.cudaLaunchHostFunc(ctypes.c_void_p(s.cuda_stream), wait, None)
        assert err == 0, err
    return gate


class Block(nn.Module):
    """A transformer block's tensors, in bf16: attention and MLP weights,
    biases, two norms."""

    def __init__(self, width):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width, bias=False)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)


def model(seed, layers=6, width=64, swapped=False, device=None):
    """`layers` blocks, the first half on cuda:0, the rest on cuda:1 (the
    other way round if `swapped`; all on `device` if given); the first two
    share their projection's weight (tied weights)."""
    torch.manual_seed(seed)
    blocks = [Block(width).to(torch.bfloat16) for _ in range(layers)]
    for i, b in enumerate(blocks):
        half = int(i < layers // 2) if swapped else int(i >= layers // 2)
        b.to(f"cuda:{half if device is None else device}")
    blocks[1].proj.weight = blocks[0].proj.weight
    return nn.Sequential(*blocks)


def odd_values():
    """Plain values of every kind of CUDA tensor the dtypes give: a 0-d
    one, an empty one, bool, int8, float8, complex, uint16, on both
    devices."""
    return {"scalar": torch.tensor(2.5, dtype=torch.bfloat16).to("cuda:1"),
            "empty": torch.empty(0, 3).to("cuda:0"),
            "bool": torch.tensor([True, False, True]).to("cuda:1"),
            "int8": torch.arange(-5, 5, dtype=torch.int8).to("cuda:0"),
            "float8": torch.linspace(-2, 2, 16).to(torch.float8_e4m3fn).to("cuda:1"),
            "complex": torch.complex(torch.arange(4.0), torch.ones(4)).to("cuda:0"),
            "uint16": torch.arange(7, dtype=torch.int32).to(torch.uint16).to("cuda:1")}


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.cpu().reshape(-1).view(torch.uint8), b.cpu().reshape(-1).view(torch.uint8))


def pattern(t, step, index, kind):
    """Values for tensor `kind` of parameter `index` at `step`: integers
    below 256 (exact in bf16) that differ from element to element, tensor
    to tensor and step to step, so a copy into the wrong place shows."""
    n = torch.arange(t.numel()) + 31 * index + 97 * step + 7 * kind
    return (n % 256).to(t.dtype).reshape(t.shape)


class CopyAdam(torch.optim.Optimizer):
    """AdamW's state -- moments like the parameter, on its device, a CPU step
    counter -- changed by copies only: each step writes pattern()'s values
    (from page-locked host memory, without a host wait, as a real
    optimizer's kernels run) into the parameters and both moments, and adds
    one to the step counter on the host."""

    def __init__(self, params):
        super().__init__(params, {"lr": 1e-3})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for i, p in enumerate(group["params"]):
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.empty_like(p)  # AdamW's: the parameter's dtype
                    state["exp_avg_sq"] = torch.empty_like(p)
                state["step"] += 1
                n = int(state["step"].item())
                for k, t in enumerate((p, state["exp_avg"], state["exp_avg_sq"])):
                    t.copy_(pattern(t, n, i, k).pin_memory(), non_blocking=True)
        return None


def trained(seed, steps, swapped=False, device=None):
    m = model(seed, swapped=swapped, device=device)
    opt = CopyAdam(m.parameters())
    for _ in range(steps):
        opt.step()
    return m, opt


def snapshot(m, opt):
    """The state's values on the host, bit for bit."""
    for d in {p.device.index for p in m.parameters()}:  # no other device is touched
        torch.cuda.synchronize(d)
    params = {k: v.detach().cpu().clone() for k, v in m.state_dict().items()}
    moments = {i: {k: v.detach().cpu().clone() for k, v in s.items()}
               for i, s in opt.state_dict()["state"].items()}
    return params, moments


def check_state(m, opt, expected, what):
    params, moments = snapshot(m, opt)
    assert params.keys() == expected[0].keys(), what
    for k in params:
        assert same_bits(params[k], expected[0][k]), \
            f"{what}: {k} {params[k].reshape(-1)[:3].tolist()} {expected[0][k].reshape(-1)[:3].tolist()}"
    assert moments.keys() == expected[1].keys(), what
    for i in moments:
        for k in moments[i]:
            assert same_bits(moments[i][k], expected[1][i][k]), f"{what}: {i}.{k}"


def devices_as_torch_sees_them(_):
    """torch reads the emulated devices' properties (the struct's layout)."""
    assert torch.cuda.is_available() and torch.cuda.device_count() == 2
    for d in range(2):
        assert torch.cuda.get_device_name(d) == f"Strata emulated device {d}"
        assert torch.cuda.get_device_capability(d) == (9, 0)
    x = torch.arange(10).to("cuda:1")
    assert x.device == torch.device("cuda:1") and torch.equal(x.cpu(), torch.arange(10))
    try:
        x + 1  # a kernel
    except Exception as e:  # torch raises the runtime's error
        assert "not supported" in str(e), e
    else:
        raise AssertionError("a kernel ran on the emulated runtime")


def blocking_save(directory):
    """A blocking save of a many-tensor state on two devices (tied weights,
    plain values of every kind, the CUDA generators) copies once into the
    step's page-locked files; a restore puts each tensor back into the live model and
    optimizer on its device. The staging is reserved ahead
    (by the first optimizer step of a fresh start), page-locked, and the
    first save's files are those; closing releases every page it locked.
    A restart's restore copies through page-locked chunks."""
    m = model(0)
    opt = CopyAdam(m.parameters())
    values = odd_values()
    state = {"model": m, "optimizer": opt, "values": values, "rng": strata.torch.RNGState()}
    with strata.torch.Checkpointer(directory, preemption_signals=[]) as ckpt:
        assert ckpt.restore(state) is None
        before = locked_bytes()
        opt.step()  # the first step of a fresh start reserves the staging
        await_reserved(ckpt)
        assert ckpt.staging_pinned and ckpt.staging_bytes > 0
        assert locked_bytes() - before >= ckpt.staging_bytes, (before, locked_bytes())
        reserved = [d for d in os.listdir(directory) if d.startswith(".strata-tmp-")]
        assert len(reserved) == 1, os.listdir(directory)
        files = data_files(os.path.join(directory, reserved[0]))
        opt.step()  # its copies still queued: save() orders its own after them
        torch.cuda.manual_seed_all(1234)
        generators = [torch.cuda.get_rng_state(d) for d in range(2)]
        ckpt.save(2, state)
        torch.cuda.manual_seed_all(99)
        opt.step()  # after save() returned: not in the checkpoint
        ckpt.wait()
        assert data_files(os.path.join(directory, "2")) == files  # the reserved, locked files
        staging = ckpt._ckpt.staging
        assert staging["devices"] == 2 and staging["in_place"], staging
        m2, opt2 = trained(7, 1)
        live = [p.data_ptr() for p in m2.parameters()]
        state2 = {"model": m2, "optimizer": opt2, "values": None, "rng": strata.torch.RNGState()}
        assert ckpt.restore(state2) == 2
        for d in range(2):  # each device's generator, as RNGState saved it
            assert torch.equal(torch.cuda.get_rng_state(d), generators[d]), d
        assert [p.data_ptr() for p in m2.parameters()] == live
        assert m2[1].proj.weight is m2[0].proj.weight
        for k, v in values.items():  # a plain value's tensors come back on the CPU
            assert state2["values"][k].is_cpu and same_bits(state2["values"][k], v), k
        assert {p.device.index for p in m2.parameters()} == {0, 1}
        check_state(m2, opt2, snapshot(*trained(0, 2)), "restored")
        # Into a model laid out on the devices the other way round (a job
        # restarted with its GPUs assigned differently): each tensor is
        # copied to the device its live counterpart is on.
        m3, opt3 = trained(8, 1, swapped=True)
        assert ckpt.restore({"model": m3, "optimizer": opt3, "values": None}) == 2
        assert m3[0].qkv.weight.device.index == 1 and m3[5].qkv.weight.device.index == 0
        check_state(m3, opt3, snapshot(*trained(0, 2)), "restored onto the other devices")
    torch._C._host_emptyCache()  # torch's own page-locked blocks (pin_memory, copies)
    assert locked_bytes() == 0, locked_bytes()  # and every step file Strata locked
    # A restarted job's restore: a checkpointer opened anew, whose step
    # files nobody page-locked. Every copy to a device goes through
    # page-locked chunks, none from the pageable files.
    m4, opt4 = trained(9, 1)
    with strata.torch.Checkpointer(directory, preemption_signals=[]) as ckpt:
        pageable = EMULATOR.strata_emulated_cuda_pageable_copies()
        assert ckpt.restore({"model": m4, "optimizer": opt4, "values": None}) == 2
        assert EMULATOR.strata_emulated_cuda_pageable_copies() == pageable
        check_state(m4, opt4, snapshot(*trained(0, 2)), "restored after a restart")


def overlapped_save(directory, side_streams=False):
    """save(overlap=True) enqueues its copies after the work queued on the
    devices' current streams (torch's default ones, or side streams the
    loop runs on) and returns; the optimizer's step right after it is
    ordered after the copies on those streams. Each save commits the state
    as it was at save(): weights, moments and the CPU step counters. A
    restore copies into the live tensors after the work queued on the
    restoring thread's current streams. The streams are held (hold()) so
    that the work before each save and each restore is still queued."""
    m, opt = trained(1, 2)
    state = {"model": m, "optimizer": opt}
    streams = [torch.cuda.Stream(d) for d in range(2)] if side_streams else []
    for s in streams:  # the loop moves to them: they start after the default streams' work
        s.wait_stream(torch.cuda.default_stream(s.device))
    with contextlib.ExitStack() as on_streams:
        for s in streams:
            on_streams.enter_context(torch.cuda.stream(s))
        with strata.torch.Checkpointer(directory, preemption_signals=[], overlap=True,
                                       max_to_keep=3) as ckpt:
            current = streams or [torch.cuda.current_stream(d) for d in range(2)]
            for step in (2, 3, 4):
                hold(current)  # the last step's writes, then the copies, queued behind it
                ckpt.save(step, state)
                opt.step()
            ckpt.wait()
            for step in (2, 3, 4):
                m2 = model(9)
                opt2 = CopyAdam(m2.parameters())
                hold(current)
                opt2.step()  # queued behind the hold: the restore's copies go after it
                assert ckpt.restore({"model": m2, "optimizer": opt2}, step=step) == step
                check_state(m2, opt2, snapshot(*trained(1, step)), f"step {step}")


def overlapped_save_on_side_streams(directory):
    overlapped_save(directory, side_streams=True)


def a_change_outside_the_step(directory):
    """A tensor changed in place after an overlapped save returned, without
    wait_staged() and outside optimizer.step(), fails that save; the step
    before stays the newest."""
    m, opt = trained(2, 1)
    state = {"model": m, "optimizer": opt}
    with strata.torch.Checkpointer(directory, preemption_signals=[], overlap=True) as ckpt:
        ckpt.save(1, state)
        ckpt.wait()
        expected = snapshot(m, opt)
        ckpt.save(2, state)
        with torch.no_grad():
            p = next(m.parameters())
            p.copy_(torch.zeros(p.shape, dtype=p.dtype))
        try:
            ckpt.wait()
        except strata.FailedPreconditionError as e:
            assert "changed in place" in str(e), e
        else:
            raise AssertionError("the save of a tensor changed under its copy was committed")
        m2, opt2 = trained(3, 1)
        assert ckpt.restore({"model": m2, "optimizer": opt2}) == 1
        check_state(m2, opt2, expected, "step 1")


def a_wait_from_another_thread(directory):
    """wait(), await_idle() or close() called from another thread while the
    training thread goes on (a monitor, a signal handler's thread) waits for
    the save on the host and orders no stream of its own. The training
    thread's next step orders its side streams after the copies without
    waiting for that wait() or await_idle() (it goes on while the copies are
    still held back), or waits for
    close() (one call at a time) and finds the copies done; each save
    commits the state as it was at save()."""
    m, opt = trained(4, 2)
    state = {"model": m, "optimizer": opt}
    streams = [torch.cuda.Stream(d) for d in range(2)]
    for s in streams:
        s.wait_stream(torch.cuda.default_stream(s.device))
    with contextlib.ExitStack() as on_streams:
        for s in streams:
            on_streams.enter_context(torch.cuda.stream(s))
        with strata.torch.Checkpointer(directory, preemption_signals=[], overlap=True) as ckpt:
            # wait(), then the native await_idle(): neither holds the step.
            for step, waiter in ((2, ckpt.wait), (3, ckpt._ckpt.await_idle)):
                copies = hold(streams, seconds=15)  # the copies stay queued behind it
                ckpt.save(step, state)
                waiting = threading.Thread(target=waiter)
                waiting.start()
                threading.Event().wait(0.1)  # the other thread waits by now
                opt.step()
                assert not copies.is_set(), \
                    f"the step waited for the other thread's {waiter.__name__}()"
                copies.set()
                waiting.join()
                ckpt.wait()
                m2, opt2 = trained(9, 1)
                assert ckpt.restore({"model": m2, "optimizer": opt2}) == step
                check_state(m2, opt2, snapshot(*trained(4, step)), f"step {step}")
            # The same with close(): the step waits for it and goes on.
            hold(streams)
            ckpt.save(4, state)
            errors = []

            def waits():
                try:
                    ckpt.wait()
                except Exception as e:  # noqa: BLE001 -- reported below
                    errors.append(e)

            waiting = threading.Thread(target=waits)  # still waiting when close() comes
            waiting.start()
            threading.Event().wait(0.1)  # the other thread is in wait() by now
            closing = threading.Thread(target=ckpt.close)
            closing.start()
            threading.Event().wait(0.1)
            opt.step()
            closing.join()
            waiting.join()
            assert not errors, errors  # the save it waited for was committed
    with strata.torch.Checkpointer(directory, preemption_signals=[]) as ckpt:
        m2, opt2 = trained(9, 1)
        assert ckpt.restore({"model": m2, "optimizer": opt2}) == 4
        check_state(m2, opt2, snapshot(*trained(4, 4)), "step 4")


def dcp_round_trip(directory):
    """dcp.save and dcp.async_save through StrataStorageWriter from CUDA
    tensors on two devices; dcp.load through StrataStorageReader copies each
    item into its CUDA tensor, in place, as it verifies (reader.direct),
    after the work queued on the loading thread's current streams (side
    streams here, each with a write into every target still queued)."""
    g = torch.Generator().manual_seed(4)
    sd = {f"layer{i}.w": torch.randn(48, 64, generator=g).to(torch.bfloat16).to(f"cuda:{i % 2}")
          for i in range(12)}
    sd.update({f"layer{i}.norm": torch.randn(64, generator=g).to(f"cuda:{i % 2}")
               for i in range(12)})
    sd["step"] = torch.tensor(11.0)
    expected = {k: v.cpu().clone() for k, v in sd.items()}
    dcp.save(sd, storage_writer=strata.dcp.StrataStorageWriter(directory), checkpoint_id=5)
    dcp.async_save(sd, storage_writer=strata.dcp.StrataStorageWriter(directory),
                   checkpoint_id=6).result()
    streams = [torch.cuda.Stream(d) for d in range(2)]
    for step in (5, 6):
        target = {k: torch.zeros(v.shape, dtype=v.dtype).to(v.device) for k, v in sd.items()}
        live = {k: v.data_ptr() for k, v in target.items()}
        reader = strata.dcp.StrataStorageReader(directory)
        with torch.cuda.stream(streams[0]), torch.cuda.stream(streams[1]):
            for s in streams:
                s.wait_stream(torch.cuda.default_stream(s.device))
            hold(streams)
            for v in target.values():  # queued on the side stream, before the load's copies
                v.copy_(torch.full(v.shape, 7, dtype=v.dtype).pin_memory(), non_blocking=True)
            dcp.load(target, storage_reader=reader, checkpoint_id=step)
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
        assert reader.direct == len(sd), (reader.direct, len(sd))
        for k, v in target.items():
            assert v.data_ptr() == live[k] and v.device == sd[k].device, k
            assert same_bits(v, expected[k]), f"step {step}: {k}"


def a_synchronous_dcp_save_copies_in_one_batch(directory):
    """A synchronous dcp.save of CUDA tensors through StrataStorageWriter
    copies them into the page-locked arena in one batch: no copy from a
    device into pageable memory (a .cpu() per tensor makes one each). While
    an async save's snapshot is still in the arena, it copies into ordinary
    memory instead and leaves the snapshot as it was."""
    g = torch.Generator().manual_seed(8)
    expected = {f"w{i}": torch.randn(32, 16, generator=g) for i in range(8)}
    expected["h"] = torch.randn(64, generator=g).to(torch.bfloat16)
    sd = {k: v.to(f"cuda:{i % 2}") for i, (k, v) in enumerate(expected.items())}
    sd["step"] = expected["step"] = torch.tensor(3.0)
    writer = strata.dcp.StrataStorageWriter(directory)
    before = EMULATOR.strata_emulated_cuda_pageable_copies()
    dcp.save(sd, storage_writer=writer, checkpoint_id=1)
    assert EMULATOR.strata_emulated_cuda_pageable_copies() == before, \
        "a synchronous save copied from a device into pageable memory"

    snapshot = writer.stage(sd)  # an async save's, not yet written
    kept = {k: v.clone() for k, v in snapshot.items()}
    doubled = {k: (v * 2).to(sd[k].device) for k, v in expected.items()}
    dcp.save(doubled, storage_writer=writer, checkpoint_id=2)
    for k, v in kept.items():
        assert same_bits(snapshot[k], v), f"the synchronous save overwrote the snapshot's {k}"
    writer.close()
    for step, want in ((1, expected), (2, {k: v * 2 for k, v in expected.items()})):
        target = {k: torch.zeros_like(v) for k, v in want.items()}
        dcp.load(target, storage_reader=strata.dcp.StrataStorageReader(directory),
                 checkpoint_id=step)
        for k, v in want.items():
            assert same_bits(target[k], v), f"step {step}: {k}"


def has_context(device):
    return torch._C._cuda_hasPrimaryContext(device)


def one_device_of_two(directory):
    """A process whose state is on its second device only (a rank of a node
    whose GPUs it all sees) makes no context on the first -- on a GPU,
    hundreds of MiB of another rank's memory: not when the engine's thread
    page-locks and recycles the step files, not when another thread waits
    for a save or closes, not in a restore, nor through strata.dcp."""
    torch.cuda.set_device(1)
    m, opt = trained(5, 1, device=1)
    state = {"model": m, "optimizer": opt, "rng": strata.torch.RNGState()}
    assert not has_context(0) and has_context(1)  # torch itself made none
    ckpt = strata.torch.Checkpointer(directory, preemption_signals=[], overlap=True,
                                     max_to_keep=2)
    assert ckpt.restore(state) is None
    opt.step()  # reserves the staging: the engine's thread locks it
    await_reserved(ckpt)
    assert ckpt.staging_pinned
    for step in (2, 3, 4, 5):  # retention recycles the files: released, locked again
        ckpt.save(step, state)
        opt.step()
        waiting = threading.Thread(target=ckpt.wait)
        waiting.start()
        waiting.join()
    expected = snapshot(*trained(5, 5, device=1))
    m2, opt2 = trained(6, 1, device=1)
    assert ckpt.restore({"model": m2, "optimizer": opt2, "rng": strata.torch.RNGState()}) == 5
    check_state(m2, opt2, expected, "step 5")
    closing = threading.Thread(target=ckpt.close)
    closing.start()
    closing.join()
    sd = {f"w{i}": torch.arange(64 * (i + 1)).to(torch.bfloat16).to("cuda:1") for i in range(4)}
    dcp.save(sd, storage_writer=strata.dcp.StrataStorageWriter(directory), checkpoint_id=9)
    target = {k: torch.zeros(v.shape, dtype=v.dtype, device="cuda:1") for k, v in sd.items()}
    reader = strata.dcp.StrataStorageReader(directory)
    dcp.load(target, storage_reader=reader, checkpoint_id=9)
    torch.cuda.synchronize(1)
    assert reader.direct == len(sd) and all(same_bits(target[k], sd[k]) for k in sd)
    assert torch.cuda.current_device() == 1
    assert not has_context(0), "a context was made on device 0, which the state is not on"


def two_optimizers_on_two_streams(directory):
    """Two optimizers of one state that step on different streams after an
    overlapped save: each one's pre-step hook orders its own current streams
    after the copies, so the second's writes (on side streams, which nothing
    holds back) do not reach the copies either, and the save commits the
    state as it was at save()."""
    def made(seed):
        m = model(seed)
        params = list(m.parameters())
        o1, o2 = CopyAdam(params[:len(params) // 2]), CopyAdam(params[len(params) // 2:])
        o1.step()
        o2.step()
        return m, o1, o2

    def values(m, o1, o2):
        for d in range(2):
            torch.cuda.synchronize(d)
        out = [v.detach().cpu().clone() for v in m.state_dict().values()]
        for o in (o1, o2):
            out += [t.detach().cpu().clone() for s in o.state_dict()["state"].values()
                    for t in s.values()]
        return out

    m, o1, o2 = made(5)
    expected = values(m, o1, o2)
    side = [torch.cuda.Stream(d) for d in range(2)]
    with strata.torch.Checkpointer(directory, preemption_signals=[], overlap=True) as ckpt:
        hold([torch.cuda.current_stream(d) for d in range(2)])  # the copies wait behind it
        ckpt.save(1, {"model": m, "o1": o1, "o2": o2})
        o1.step()  # on the default streams
        with contextlib.ExitStack() as on_side:
            for s in side:
                on_side.enter_context(torch.cuda.stream(s))
            o2.step()
        ckpt.wait()
        m2, p1, p2 = made(9)
        assert ckpt.restore({"model": m2, "o1": p1, "o2": p2}) == 1
        got = values(m2, p1, p2)
        assert len(got) == len(expected), (len(got), len(expected))
        bad = [i for i, (a, b) in enumerate(zip(got, expected)) if not same_bits(a, b)]
        assert not bad, f"{len(bad)} tensors of the committed step are not the state at save()"


def staging_a_dtensor_on_a_cuda_mesh(directory):
    """stage_state_dict() (what StrataStorageWriter.stage() gives DCP's
    async save) of DTensors on a CUDA mesh: each is rebuilt over its staged
    shard on the host, bit for bit, and no GPU memory is taken for it
    (DTensor.from_local would move the shard back to the mesh's device).
    The arena page-locks exactly its own size (in 64 KiB steps, not torch's
    pinned allocator's powers of two) and release_staged() unlocks it."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cuda", (1,))
        sd = {"w": DTensor.from_local(torch.arange(19 * 4096).to(torch.bfloat16).cuda(), mesh,
                                      [Shard(0)]),
              "b": DTensor.from_local(torch.arange(64.0).cuda(), mesh, [Replicate()])}
        torch.cuda.synchronize()
        before, locked = torch.cuda.memory_allocated(), locked_bytes()
        staged = strata.torch.stage_state_dict(sd)
        assert torch.cuda.memory_allocated() == before, "staging took GPU memory"
        assert locked_bytes() - locked == 3 << 16, locked_bytes() - locked  # 152.25 KiB staged
        for k, v in sd.items():
            s = staged[k]
            assert isinstance(s, DTensor) and s.placements == v.placements, k
            assert s.to_local().device.type == "cpu", f"{k}'s staged shard is on {s.device}"
            assert s.shape == v.shape and same_bits(s.to_local(), v.to_local().cpu()), k
        strata.torch.release_staged()
        assert locked_bytes() == locked, "release_staged() left the arena page-locked"
    finally:
        dist.destroy_process_group()


CASES = {f.__name__: f for f in (devices_as_torch_sees_them, blocking_save, overlapped_save,
                                 overlapped_save_on_side_streams, a_change_outside_the_step,
                                 a_wait_from_another_thread, dcp_round_trip, one_device_of_two,
                                 two_optimizers_on_two_streams, staging_a_dtensor_on_a_cuda_mesh,
                                 a_synchronous_dcp_save_copies_in_one_batch)}

if __name__ == "__main__":
    CASES[sys.argv[1]](sys.argv[2])
    print("ok")
