"""strata.torch: model, optimizer, scheduler, RNG and loader state by name
and dtype, no unpickling, clear errors for shapes that do not fit."""

import json
import math
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import strata
import strata.torch


def make(width=16, seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.95))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    return model, opt, sched


def train(model, opt, sched, steps):
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(4, 8)).square().mean().backward()
        opt.step()
        sched.step()


def assert_same(a, b, path="state"):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype, path
        assert torch.equal(a, b), path
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, path
        np.testing.assert_array_equal(a, b, err_msg=path)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}.{i}")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), path
    else:
        assert a == b, path


def test_training_state_round_trips_exactly(scratch):
    model, opt, sched = make()
    train(model, opt, sched, 5)
    gen = torch.Generator().manual_seed(7)
    torch.rand(3, generator=gen)  # advance it
    extra = {"epoch": 3, "ids": (1, 2, 3), 4: "int key", "nan": float("nan"), "blob": b"\x00\x01",
             "bf16": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3),
             "scalar": torch.tensor(2.5, dtype=torch.float64),
             "np": np.arange(6, dtype=np.int16).reshape(3, 2), "none": None,
             "cplx": torch.tensor([1 + 2j, 3 - 4j])}
    random.seed(11)
    ckpt = strata.torch.Checkpointer(str(scratch))
    state = {"model": model, "optimizer": opt, "scheduler": sched, "gen": gen,
             "rng": strata.torch.RNGState(), "extra": extra}
    ckpt.save(5, state)
    ckpt.wait()
    expected_rng = (random.random(), np.random.random(), torch.rand(1))
    expect = {"model": model.state_dict(), "optimizer": opt.state_dict(),
              "scheduler": sched.state_dict(), "gen": gen.get_state()}

    m2, o2, s2 = make(seed=1)  # different initial values
    gen2 = torch.Generator()
    target = {"model": m2, "optimizer": o2, "scheduler": s2, "gen": gen2,
              "rng": strata.torch.RNGState(), "extra": None}
    assert ckpt.restore(target) == 5
    assert_same(m2.state_dict(), expect["model"])
    assert_same(o2.state_dict(), expect["optimizer"])
    assert_same(s2.state_dict(), expect["scheduler"])
    assert torch.equal(gen2.get_state(), expect["gen"])
    assert (random.random(), np.random.random(), torch.rand(1)) == expected_rng
    assert_same(target["extra"], extra, "extra")
    ckpt.close()


def test_a_resumed_optimizer_continues_exactly(scratch):
    model, opt, sched = make()
    train(model, opt, sched, 4)
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(4, {"model": model, "optimizer": opt, "scheduler": sched,
                      "rng": strata.torch.RNGState()})
        ckpt.wait()
        train(model, opt, sched, 4)
        m2, o2, s2 = make(seed=3)
        assert ckpt.restore({"model": m2, "optimizer": o2, "scheduler": s2,
                             "rng": strata.torch.RNGState()}) == 4
    train(m2, o2, s2, 4)
    assert_same(m2.state_dict(), model.state_dict())
    assert_same(o2.state_dict(), opt.state_dict())


def test_a_shape_that_does_not_fit_names_the_tensor(scratch):
    model, opt, _ = make(width=16)
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"model": model})
        ckpt.wait()
        other, _, _ = make(width=32)
        before = {k: v.clone() for k, v in other.state_dict().items()}
        with pytest.raises(strata.InvalidArgumentError,
                           match=r"step 1: tensor 'model\.0\.weight' is float32\[16, 8\] in "
                                 r"the checkpoint but float32\[32, 8\] here"):
            ckpt.restore({"model": other})
        assert_same(other.state_dict(), before)  # nothing was half loaded
        with pytest.raises(strata.InvalidArgumentError, match="step 1 has no entry 'optimizer'"):
            ckpt.restore({"model": model, "optimizer": opt})


def data_files(step_dir: Path):
    return [p for p in step_dir.iterdir() if p.is_file() and p.name != "MANIFEST"
            and not p.name.startswith("manifest")]


def test_a_corrupted_checkpoint_falls_back_to_the_previous_step(scratch):
    model, opt, sched = make()
    with strata.torch.Checkpointer(str(scratch), async_save=False, max_to_keep=3) as ckpt:
        ckpt.save(1, {"model": model})
        at_step_1 = {k: v.clone() for k, v in model.state_dict().items()}
        train(model, opt, sched, 1)
        ckpt.save(2, {"model": model})
    step2 = scratch / "2"
    assert step2.is_dir(), sorted(p.name for p in scratch.iterdir())
    victim = max(step2.iterdir(), key=lambda p: p.stat().st_size)  # the data file
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    victim.write_bytes(bytes(raw))

    restored, _, _ = make(seed=5)
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        assert ckpt.restore({"model": restored}) == 1
    assert_same(restored.state_dict(), at_step_1)


def test_unsupported_values_are_refused_with_their_path(scratch):
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        with pytest.raises(TypeError, match=r"cannot save extra\.fn: builtin_function_or_method is not"):
            ckpt.save(1, {"extra": {"fn": print}})
        assert ckpt.restore({}) is None


def test_a_plain_strata_checkpoint_is_not_mistaken_for_a_torch_one(scratch):
    with strata.Checkpointer(str(scratch)) as plain:
        plain.save(1, {"w": np.zeros(4)})
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        with pytest.raises(strata.InvalidArgumentError, match="not saved by strata.torch"):
            ckpt.restore({"model": make()[0]})


def test_numpy_values_keep_their_shape_and_type(scratch):
    values = {"zero_d": np.array(5.0), "scalar": np.float32(1.5), "i": np.int64(7),
              "b": np.bool_(True), "m": np.ones((2, 0, 3), np.int8)}
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"v": values})
        target = {"v": None}
        assert ckpt.restore(target) == 1
    got = target["v"]
    assert got["zero_d"].shape == () and got["zero_d"] == 5.0
    for k in ("scalar", "i", "b"):
        assert type(got[k]) is type(values[k]) and got[k] == values[k], k
    assert got["m"].shape == (2, 0, 3) and got["m"].dtype == np.int8
    with strata.torch.Checkpointer(str(scratch / "s")) as ckpt:
        with pytest.raises(TypeError, match="structured dtypes"):
            ckpt.save(1, {"v": np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")])})
        with pytest.raises(TypeError, match="state keys must be str"):
            ckpt.save(1, {1: {"a": 1}, "1": {"b": 2}})


def test_lazy_views_are_saved_as_their_values(scratch):
    c = torch.tensor([1 + 2j, 3 - 4j])
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"v": {"conj": c.conj(), "neg": c.conj().imag, "t": c.t()}})
        target = {"v": None}
        ckpt.restore(target)
    assert torch.equal(target["v"]["conj"], c.conj().resolve_conj())
    assert torch.equal(target["v"]["neg"], c.conj().imag.resolve_neg())


def test_a_mismatch_in_one_entry_loads_no_entry(scratch):
    a, _, _ = make(width=16, seed=0)
    b, _, _ = make(width=16, seed=1)
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"a": a, "b": b})
        ckpt.wait()
        fresh_a, _, _ = make(width=16, seed=2)
        wrong_b, _, _ = make(width=32, seed=3)
        before = {k: v.clone() for k, v in fresh_a.state_dict().items()}
        with pytest.raises(strata.InvalidArgumentError, match="tensor 'b.0.weight'"):
            ckpt.restore({"a": fresh_a, "b": wrong_b})
    assert_same(fresh_a.state_dict(), before)


# Every dtype of the running torch but the quantized ones (quantized tensors
# are refused): float8, float4, uint16/32/64, complex32, the sub-byte shell
# dtypes (uint4, ...), whichever this torch has.
DTYPES = sorted((v for v in vars(torch).values()
                 if isinstance(v, torch.dtype) and not str(v).startswith("torch.q")), key=str)


def as_ints(t):
    """The tensor's elements as integers of the same size: compares bits,
    for dtypes torch.equal does not support (float8) or where NaN != NaN."""
    if t.element_size() > 8:  # complex128
        t = t.contiguous().reshape(-1).view(torch.int64)
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[
        t.element_size()])


def random_tensor(dtype, rows, cols, seed):
    """rows x cols elements of `dtype`, every byte random."""
    g = torch.Generator().manual_seed(seed)
    size = dtype.itemsize
    return torch.randint(0, 256, (rows, cols * size), dtype=torch.uint8, generator=g).view(dtype)


def test_every_dtype_round_trips_bit_for_bit(scratch):
    names = [str(dt)[6:] for dt in DTYPES]
    for wanted in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                   "uint16", "uint32", "uint64", "bfloat16", "complex32", "complex128"):
        assert wanted in names or not hasattr(torch, wanted), wanted
    values = {}
    with warnings.catch_warnings():  # complex32: "ComplexHalf support is experimental"
        warnings.simplefilter("ignore", UserWarning)
        for i, dt in enumerate(DTYPES):
            t = random_tensor(dt, 3, 4, seed=i)
            values[str(dt)[6:]] = {"t": t, "transposed": t.t(), "empty": t[:0],
                                   "scalar": t.reshape(-1)[5]}
        with strata.torch.Checkpointer(str(scratch)) as ckpt:
            ckpt.save(1, {"v": values, "dtypes": DTYPES})
            target = {"v": None, "dtypes": None}
            assert ckpt.restore(target) == 1
    assert target["dtypes"] == DTYPES
    got = target["v"]
    for name, tensors in values.items():
        for k, want in tensors.items():
            have = got[name][k]
            assert have.dtype == want.dtype and have.shape == want.shape, (name, k, have)
            assert torch.equal(as_ints(have), as_ints(want)), (name, k)
    dtypes = strata.restore_step(str(scratch), 1).dtypes
    assert dtypes["v.bfloat16.t"] == "bfloat16" and dtypes["v.uint16.t"] == "uint16"
    assert dtypes["v.float32.t"] == "float32" and dtypes["v.bool.t"] == "bool"
    if hasattr(torch, "float8_e4m3fn"):
        assert dtypes["v.float8_e4m3fn.t"] == "bytes"


def test_a_module_with_float8_and_uint_buffers_restores_them(scratch):
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip(f"torch {torch.__version__} has no float8")

    def module(seed):
        m = nn.Linear(4, 2)
        m.register_buffer("scale", random_tensor(torch.float8_e4m3fn, 2, 4, seed))
        m.register_buffer("ids", random_tensor(torch.uint32, 3, 1, seed))
        return m

    saved, other = module(1), module(2)
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"m": saved})
        assert ckpt.restore({"m": other}) == 1
    for k, v in saved.state_dict().items():
        assert torch.equal(as_ints(other.state_dict()[k]), as_ints(v)), k


def test_a_checkpoint_written_before_the_dtype_table_still_restores(scratch):
    """A format 1 tree and items exactly as strata.torch wrote them before
    torch 2 dtypes: bfloat16 as int16 bits, complex as bytes."""
    bf16 = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)
    cplx = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    f32 = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    flags = torch.tensor([True, False])
    tree = {"format": 1, "entries": {"v": {"$value": {"$dict": [
        ["bf16", {"$tensor": "v.bf16", "dtype": "bfloat16", "shape": [3]}],
        ["cplx", {"$tensor": "v.cplx", "dtype": "complex64", "shape": [2]}],
        ["f32", {"$tensor": "v.f32", "dtype": "float32", "shape": [2, 3]}],
        ["flags", {"$tensor": "v.flags", "dtype": "bool", "shape": [2]}],
        ["dt", {"$torch_dtype": "bfloat16"}]]}}}}
    items = {"v.bf16": (bf16.view(torch.int16).numpy(), "bfloat16"),
             "v.cplx": (cplx.view(torch.uint8).numpy(), "bytes"),
             "v.f32": f32.numpy(), "v.flags": flags.numpy(),
             strata.torch.TREE_ITEM: (json.dumps(tree).encode(), "bytes")}
    with strata.Checkpointer(str(scratch)) as plain:
        plain.save(1, items)
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        target = {"v": None}
        assert ckpt.restore(target) == 1
    assert_same(target["v"], {"bf16": bf16, "cplx": cplx, "f32": f32, "flags": flags,
                              "dt": torch.bfloat16})


def test_a_dtype_this_torch_lacks_is_a_data_loss_error(scratch):
    tree = {"format": 1, "entries": {"v": {"$value": {
        "$tensor": "v", "dtype": "float3_e1m1", "shape": [2]}}}}
    with strata.Checkpointer(str(scratch)) as plain:
        plain.save(1, {"v": (b"\0\0", "bytes"),
                       strata.torch.TREE_ITEM: (json.dumps(tree).encode(), "bytes")})
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        with pytest.raises(strata.DataLossError,
                           match=r"tensor item 'v' \(float3_e1m1\) .* dtype torch .* does not"):
            ckpt.restore({"v": None})


def test_a_restored_optimizer_owns_its_state(scratch):
    """torch 2's Optimizer.load_state_dict keeps the tensors it is given; they
    must not be views that hold the whole restored step in memory."""
    model, opt, sched = make()
    train(model, opt, sched, 2)
    m2, o2, _ = make(seed=1)
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(2, {"optimizer": opt})
        assert ckpt.restore({"optimizer": o2}) == 2
    state = [t for s in o2.state.values() for t in s.values()]
    assert len(state) == 3 * len(list(m2.parameters()))  # step, exp_avg, exp_avg_sq
    # torch.from_numpy's storage (a view over restored memory) is not resizable.
    assert all(t.untyped_storage().resizable() for t in state)
    assert_same(o2.state_dict(), opt.state_dict())


def test_rng_state_covers_every_device_type_present(scratch):
    kinds = sorted(strata.torch._device_generators())  # [] on a CPU-only machine
    assert ("cuda" in kinds) == torch.cuda.is_available()
    rng = strata.torch.RNGState()
    assert set(rng.state_dict()) == {"python", "numpy", "torch", *kinds}

    def draw():
        return [random.random(), np.random.random(), torch.rand(2)] + \
            [torch.rand(2, device=k).cpu() for k in kinds]

    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"rng": rng})
        expected = draw()
        draw()
        assert ckpt.restore({"rng": strata.torch.RNGState()}) == 1
    assert_same(draw(), expected)


class DeviceRNG:
    """An RNGState saved on a machine with generators of `kind` devices."""

    def __init__(self, kind):
        self.kind = kind

    def state_dict(self):
        return dict(strata.torch.RNGState().state_dict(),
                    **{self.kind: [torch.zeros(16, dtype=torch.uint8)] * 2})

    def load_state_dict(self, state):
        raise AssertionError("not restored into")


def test_generators_of_a_device_type_not_present_are_left_out_with_a_warning(scratch):
    present = strata.torch._device_generators()
    kind = next(k for k in ("xpu", "mps", "cuda", "mtia") if k not in present)
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"rng": DeviceRNG(kind)})
        expected = (random.random(), np.random.random(), torch.rand(1))
        with pytest.warns(RuntimeWarning, match=rf"generator states of 2 {kind} device\(s\), "
                                                rf"this process has 0 {kind} device"):
            assert ckpt.restore({"rng": strata.torch.RNGState()}) == 1
    assert (random.random(), np.random.random(), torch.rand(1)) == expected


def test_a_tensor_on_an_accelerator_is_saved_from_its_memory(scratch):
    kinds = sorted(strata.torch._device_generators())
    if not kinds:
        pytest.skip("no accelerator here")
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        for i, kind in enumerate(kinds, 1):
            t = torch.arange(6, dtype=torch.bfloat16, device=kind).reshape(2, 3)
            ckpt.save(i, {"t": t})
            target = {"t": None}
            assert ckpt.restore(target) == i
            assert torch.equal(target["t"], t.cpu()), kind


def test_a_restore_leaves_no_garbage_for_the_collector(scratch):
    """A restore plans with Python's collector paused and frees what it made
    before it runs again, so restores of a state of many tensors start
    (almost) no collection; each one started one before (walking the plan's
    containers, and now and then every object of the process)."""
    import gc
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 8)) for _ in range(100)])
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 8)).square().mean().backward()
    opt.step()
    state = {"model": model, "optimizer": opt}
    started = []
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, state)
        ckpt.wait()
        ckpt.restore(state)
        gc.collect()
        gc.callbacks.append(lambda phase, info: started.append(phase) if phase == "start" else 0)
        try:
            for _ in range(10):
                assert ckpt.restore(state) == 1
        finally:
            gc.callbacks.pop()
    # One may come due from what the restores keep (the optimizer's new
    # state replaces its old one): the counter is not exact.
    assert len(started) <= 1, started
