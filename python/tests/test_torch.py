"""strata.torch: model, optimizer, scheduler, RNG and loader state by name
and dtype, no unpickling, clear errors for shapes that do not fit."""

import math
import random
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
