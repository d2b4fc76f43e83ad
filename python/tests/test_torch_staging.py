"""strata.torch's staging: one copy of each tensor, straight into the step's
files (set up once, ahead of the first save, recycled; page-locked where CUDA
is), a borrowed save that the engine writes from directly, overlapped saves
ordered before the optimizer's next step, and restores copied into the live
tensors by the stager as they verify (stage_state_dict() is in
test_torch_stage.py). The CUDA tests are skipped without a CUDA device;
scripts/gpu-check.sh runs them on a GPU machine."""

import contextlib
import fcntl
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
from torch import nn

import strata
import strata.torch

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device (scripts/gpu-check.sh)")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make(device="cpu", seed=0, width=32):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, 4)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, opt


def train(model, opt, steps, device="cpu"):
    g = torch.Generator().manual_seed(steps)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g).to(device)
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()


def snapshot(model, opt):
    return ({k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
            {i: {k: v.detach().cpu().clone() if torch.is_tensor(v) else v for k, v in s.items()}
             for i, s in opt.state_dict()["state"].items()})


def assert_state(model, opt, expected):
    params, state = snapshot(model, opt)
    assert params.keys() == expected[0].keys()
    for k in params:
        assert torch.equal(params[k], expected[0][k]), k
    assert state.keys() == expected[1].keys()
    for i in state:
        for k in state[i]:
            a, b = state[i][k], expected[1][i][k]
            assert torch.equal(a, b) if torch.is_tensor(a) else a == b, (i, k)


def all_dtype_tensors(device="cpu"):
    out = {}
    plain = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
             torch.float16, torch.bfloat16, torch.float32, torch.float64)
    for name, dtype in sorted(strata.torch._TORCH_DTYPES.items()):
        if dtype in plain:
            t = torch.arange(12).reshape(3, 4).to(dtype)
        else:  # complex, float8, float4, uint16-64, sub-byte: random bit patterns
            try:
                t = torch.randint(0, 255, (3, 4 * dtype.itemsize), dtype=torch.uint8).view(dtype)
            except (RuntimeError, TypeError):
                continue
        try:
            out[name] = t.to(device)
        except (RuntimeError, TypeError):
            continue
    return out


def bits(t):
    t = t.detach().cpu()
    return strata.torch._bits(t).contiguous().reshape(-1).view(torch.uint8)


# --- the engine's borrowed save, from Python --------------------------------

def test_a_borrowed_save_reads_the_callers_buffer_once_ready(scratch):
    buf = np.zeros(1 << 20, dtype=np.float32)
    release = threading.Event()
    calls = []

    def ready():
        release.wait(10)
        buf[:] = 7  # still the caller's until ready() returns
        calls.append(1)

    with strata.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"w": buf}, borrowed=True, ready=ready)
        status = ckpt.status
        assert status.borrowed_in_flight and status.in_flight_step == 1
        assert status.staging_bytes == 0  # nothing copied into the engine's memory
        release.set()
        ckpt.wait()
        assert calls == [1]
        assert not ckpt.status.borrowed_in_flight
        restored = ckpt.restore()
    assert (restored.items["w"] == 7).all()


def test_a_failing_ready_fails_the_save_and_commits_nothing(scratch):
    with strata.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"w": np.ones(8)})
        ckpt.wait()

        def ready():
            raise RuntimeError("tensor 'w' changed under its copy")

        ckpt.save(2, {"w": np.ones(8)}, borrowed=True, ready=ready)
        with pytest.raises(strata.FailedPreconditionError, match="changed under its copy"):
            ckpt.wait()
        assert ckpt.restore().step == 1


def test_an_async_save_that_is_not_borrowed_still_uses_the_engines_staging(scratch):
    with strata.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"w": np.ones(1000, dtype=np.float32)})
        assert ckpt.status.staging_bytes >= 4000


# --- strata.torch on CPU tensors --------------------------------------------

@pytest.mark.parametrize("overlap", [False, True])
def test_a_tensor_changed_right_after_save_is_not_in_the_checkpoint(scratch, overlap):
    model, opt = make()
    train(model, opt, 2)
    expected = snapshot(model, opt)
    with strata.torch.Checkpointer(str(scratch), overlap=overlap) as ckpt:
        ckpt.save(2, {"model": model, "optimizer": opt})
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1000)  # before the background write has even started
        train(model, opt, 1)  # the optimizer's step too
        m2, o2 = make(seed=5)
        train(m2, o2, 1)
        assert ckpt.restore({"model": m2, "optimizer": o2}) == 2
    assert_state(m2, o2, expected)


def data_files(path):
    return {f: os.stat(os.path.join(path, f)).st_ino for f in os.listdir(path)
            if f.startswith("data-")}


def await_reserved(ckpt):
    for _ in range(2000):
        if not ckpt.status.reserving:
            return
        threading.Event().wait(0.005)
    raise AssertionError("the reservation never finished")


def test_saves_copy_into_the_step_files_set_up_once_and_recycled(scratch):
    model, opt = make(width=256)
    train(model, opt, 1)
    state = {"model": model, "optimizer": opt}
    nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        assert ckpt.staging_bytes == 0
        for step in (1, 2):
            ckpt.save(step, state)
            ckpt.wait()
            await_reserved(ckpt)
        size = ckpt.staging_bytes  # two steps' files, params + exp_avg + exp_avg_sq each
        assert 6 * nbytes <= size <= 6 * nbytes + (1 << 18), (size, nbytes)
        assert not ckpt.staging_pinned  # a CPU state: nothing copies to a device
        first = data_files(scratch / "1")
        for step in (3, 4, 5):
            train(model, opt, 1)
            ckpt.save(step, state)
            ckpt.wait()
            assert ckpt.staging_bytes == size
        assert data_files(scratch / "5") == first  # step 1's files, recycled twice
        assert ckpt.status.staging_bytes == 0  # the engine copied nothing
        assert ckpt._ckpt.staging["in_place"]


def test_a_reservation_is_the_first_saves_files(scratch):
    model, opt = make(width=256)
    state = {"model": model, "optimizer": opt}
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        assert ckpt.restore(state) is None  # a fresh job: nothing to restore...
        assert ckpt.staging_bytes == 0
        train(model, opt, 1)  # ...so its first optimizer step reserves the memory
        await_reserved(ckpt)
        assert ckpt.staging_bytes > 0
        reserved = [d for d in os.listdir(scratch) if d.startswith(".strata-tmp-")]
        assert len(reserved) == 1, os.listdir(scratch)
        files = data_files(scratch / reserved[0])
        ckpt.save(1, state)
        ckpt.wait()
        assert data_files(scratch / "1") == files  # the save set nothing up


def test_the_layout_follows_a_tensor_replaced_resized_or_retyped(scratch):
    values = {"a": torch.arange(1000, dtype=torch.float32),
              "b": torch.ones(300, dtype=torch.int64)}
    with strata.torch.Checkpointer(str(scratch), max_to_keep=3) as ckpt:
        ckpt.save(1, {"v": values})
        batch = ckpt._batch
        values["a"] = torch.arange(1000, dtype=torch.float32) * 2  # replaced: the same layout
        ckpt.save(2, {"v": values})
        assert ckpt._batch is batch
        values["b"] = torch.ones(600, dtype=torch.int64)  # resized
        ckpt.save(3, {"v": values})
        assert ckpt._batch is not batch
        batch = ckpt._batch
        values["a"] = values["a"].to(torch.bfloat16)  # re-typed
        ckpt.save(4, {"v": values})
        assert ckpt._batch is not batch
        ckpt.wait()
        for step, (a_dtype, b_len) in {2: (torch.float32, 300), 3: (torch.float32, 600),
                                       4: (torch.bfloat16, 600)}.items():
            target = {"v": None}
            assert ckpt.restore(target, step=step) == step
            assert target["v"]["a"].dtype == a_dtype
            assert torch.equal(target["v"]["a"], (torch.arange(1000.0) * 2).to(a_dtype))
            assert target["v"]["b"].shape == (b_len,)


def test_a_state_saved_again_is_encoded_from_the_last_save_and_still_follows_it(scratch):
    # An unchanged state's second save takes each tensor's spec and tree node
    # from the first (no new layout, no new tree bytes) and reads the values
    # as they are now; a tensor changed under the same object (its .data set
    # to other memory, a transposed view of the same memory, another dtype,
    # resized in place) is encoded afresh, and every step restores as it was.
    model, opt = make()
    train(model, opt, 1)
    free = {"w": torch.arange(16.0).reshape(4, 4), "n": torch.arange(5)}
    state = {"model": model, "optimizer": opt, "free": free}
    expected = {}
    with strata.torch.Checkpointer(str(scratch), max_to_keep=10) as ckpt:
        ckpt.save(1, state)
        expected[1] = (snapshot(model, opt), {k: v.clone() for k, v in free.items()})
        first = ckpt._encoded
        train(model, opt, 1)  # values change in place
        free["w"].add_(1)
        ckpt.save(2, state)
        expected[2] = (snapshot(model, opt), {k: v.clone() for k, v in free.items()})
        second = ckpt._encoded
        assert all(a is b for a, b in zip(second.specs[:-1], first.specs[:-1]))
        assert second.tree_item is first.tree_item
        changes = [lambda: free["w"].set_(free["w"].t()),                    # same memory, strided
                   lambda: setattr(free["w"], "data", free["w"].data + 1),   # other memory
                   lambda: setattr(free["w"], "data", free["w"].data.double()),  # re-typed
                   lambda: free["n"].resize_(7).fill_(3)]                    # resized in place
        for step, change in enumerate(changes, start=3):
            with torch.no_grad():
                change()
            ckpt.save(step, state)
            expected[step] = (snapshot(model, opt), {k: v.clone() for k, v in free.items()})
        ckpt.wait()
        for step, (trained, values) in expected.items():
            model2, opt2 = make(seed=1)
            target = {"model": model2, "optimizer": opt2,
                      "free": {"w": torch.zeros(1), "n": torch.zeros(1)}}
            assert ckpt.restore(target, step=step) == step
            assert_state(model2, opt2, trained)
            for k, v in values.items():
                got = target["free"][k]
                assert got.dtype == v.dtype and torch.equal(got, v), (step, k, got, v)


def deep(layers=60):
    torch.manual_seed(3)
    model = nn.Sequential(*[nn.Sequential(nn.LayerNorm(16), nn.Linear(16, 16))
                            for _ in range(layers)])
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def train_deep(model, opt):
    opt.zero_grad()
    model(torch.randn(4, 16)).square().mean().backward()
    opt.step()


def test_the_planned_walk_is_decode_fit_and_place_in_one(scratch):
    """A planned restore walks a stateful entry's tree once (_tree._plan):
    what it gives -- the value, and the (live, saved) pairs in order -- is
    what decoding, fitting and placing give in three walks, for a tensor
    with a live one to go into and for the rare nodes beside it (a tensor
    with none, a sparse live tensor, an array, bytes, a dtype, tuples, a
    key that is not a string);
    while no rare node is met, nothing is left for _materialize."""
    from strata import _tree

    live = {"w": torch.ones(3, 2), "n": {"b": torch.zeros(4, dtype=torch.bfloat16)},
            "pair": (torch.ones(2), 7), "sparse": torch.eye(2).to_sparse(),
            "gone": None, "a": np.arange(3), "raw": b"xy", "dt": torch.float16,
            "keyed": {(1, 2): torch.ones(1)}}
    saved = dict(live, gone=torch.ones(5), sparse=torch.eye(2))
    encoder = _tree._Encoder()
    tree = encoder.encode(saved, "state")

    def three_walks():
        pairs = []
        value = _tree._Decoder(None, 1, False).decode(tree)
        value = _tree._fit(value, live, "state", 1, check=True)
        return _tree._place(value, live, False, pairs), pairs

    def one_walk():
        pairs, generic = [], [0]
        value = _tree._plan(tree, live, "state", _tree._Decoder(None, 1, False), pairs, generic)
        return value, pairs, generic[0]

    def same(a, b):
        if isinstance(a, _tree._Placeholder):
            return (type(b) is _tree._Placeholder and (a.name, a.dtype, a.shape) ==
                    (b.name, b.dtype, tuple(b.shape)))
        if isinstance(a, (dict, list, tuple)):
            return type(a) is type(b) and len(a) == len(b) and all(
                same(x, y) for x, y in (zip(a.values(), b.values()) if isinstance(a, dict)
                                        else zip(a, b))) and (
                not isinstance(a, dict) or list(a) == list(b))
        if isinstance(a, _tree._ArrayPlaceholder):
            return type(b) is _tree._ArrayPlaceholder and a.node == b.node
        return a is b or a == b

    expected, expected_pairs = three_walks()
    value, pairs, generic = one_walk()
    assert same(expected, value)
    assert [d for d, _ in pairs] == [d for d, _ in expected_pairs]
    assert all(d is e for (d, _), (e, _) in zip(pairs, expected_pairs))
    # A tensor paired with a live one of its dtype and shape comes with its
    # item's name alone.
    def placeholder(dst, src):
        return _tree._Placeholder(src, dst.dtype, dst.shape) if type(src) is str else src

    assert all(same(t, placeholder(d, s)) for (d, s), (_, t) in zip(pairs, expected_pairs))
    assert any(type(s) is str for _, s in pairs)
    assert value["w"] is live["w"] and value["n"]["b"] is live["n"]["b"]
    assert value["keyed"][(1, 2)] is live["keyed"][(1, 2)]
    assert isinstance(value["gone"], _tree._Placeholder)  # no live tensor: read later
    assert generic > 0
    # A state of tensors that all have live ones leaves no placeholder.
    plain = {"w": live["w"], "n": live["n"], "pair": live["pair"]}
    pairs, generic = [], [0]
    _tree._plan(_tree._Encoder().encode(plain, "state"), plain, "state",
                _tree._Decoder(None, 1, False), pairs, generic)
    assert generic == [0] and len(pairs) == 3
    # A shape or a dtype that differs is refused, as _fit refuses it.
    for other in (torch.ones(2, 3), torch.ones(3, 2, dtype=torch.float64)):
        with pytest.raises(strata.InvalidArgumentError, match=r"tensor 'state\.w' is float32\[3, 2\]"):
            _tree._plan(tree, dict(live, w=other), "state", _tree._Decoder(None, 1, False),
                        [], [0])


@pytest.mark.parametrize("overlap", [False, True])
def test_a_many_tensor_state_is_saved_as_it_was_at_save(scratch, overlap):
    model, opt = deep()
    train_deep(model, opt)
    expected = snapshot(model, opt)
    steps_before = [s["step"].clone() for s in opt.state.values()]
    with strata.torch.Checkpointer(str(scratch), overlap=overlap) as ckpt:
        ckpt.save(1, {"model": model, "optimizer": opt})
        train_deep(model, opt)  # weights, moments and the CPU step counters all move at once
        assert all(s["step"] != b for s, b in zip(opt.state.values(), steps_before))
        m2, o2 = deep()
        train_deep(m2, o2)
        assert ckpt.restore({"model": m2, "optimizer": o2}) == 1
        assert ckpt._pipelined == 4 * len(list(model.parameters()))
    assert len(o2.state) == 240 and len(snapshot(m2, o2)[0]) == 240
    assert_state(m2, o2, expected)


def test_a_crash_between_the_copy_and_the_commit_leaves_the_previous_step(scratch):
    script = f"""
import torch, strata.torch
torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
with strata.torch.Checkpointer({str(scratch)!r}, async_save=False) as ckpt:
    for step in (1, 2):
        with torch.no_grad():
            model.weight.fill_(step)
        ckpt.save(step, {{"model": model}})
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path),
               STRATA_CRASH_AT="save.before_checksum:2")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == -9, out.stdout + out.stderr  # killed at the second save's commit
    model = nn.Linear(64, 64)
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        # Opening removed what the killed save left; no step of it shows.
        assert sorted(os.listdir(scratch)) == [".strata-lock", "1"], os.listdir(scratch)
        assert ckpt.restore({"model": model}) == 1
    assert torch.equal(model.weight, torch.full((64, 64), 1.0))


def test_live_tensors_the_stager_does_not_copy_into_are_restored(scratch):
    """The stager copies only into contiguous live tensors on the CPU or a
    CUDA device; restore() copies the rest itself (_Planner.leftover): a
    transposed buffer of a module, restored in place."""
    module = torch.nn.Module()
    module.register_buffer("t", torch.arange(12.0).reshape(3, 4).t())
    module.register_buffer("c", torch.arange(5.0))
    live_t, live_c = module.t, module.c
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"m": module})
        module.t.zero_()
        module.c.zero_()
        assert ckpt.restore({"m": module}) == 1
    assert module.t is live_t and module.c is live_c and not module.t.is_contiguous()
    assert torch.equal(module.t, torch.arange(12.0).reshape(3, 4).t())
    assert torch.equal(module.c, torch.arange(5.0))


def test_a_live_tensor_on_another_device_is_left_to_restore(scratch):
    """A live tensor neither on the CPU nor on a CUDA device is no
    destination of the stager's, and not dropped either: it is left to
    restore()'s own copy, as a non-contiguous one is."""
    from strata import _restore, _tree

    elsewhere = torch.empty(3, device="meta")
    contiguous, transposed = torch.zeros(4), torch.zeros(2, 3).t()
    planner = _restore._Planner({})
    out = planner._destinations([(elsewhere, "a"), (contiguous, "b"), (transposed, "c"),
                                 (torch.zeros(0), "d")])
    assert [(name, device) for name, _, _, device, _ in out] == [("b", -1)]
    assert [(d is e, s.name, tuple(s.shape)) for (d, s), e in
            zip(planner.leftover, (elsewhere, transposed))] == [(True, "a", (3,)),
                                                                (True, "c", (3, 2))]
    assert all(type(s) is _tree._Placeholder for _, s in planner.leftover)
    assert planner.done == {("b", contiguous.data_ptr())}


def test_every_dtype_view_and_non_contiguous_tensor_round_trips(scratch):
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    values = dict(all_dtype_tensors())
    values["transposed"] = base.t()
    values["strided"] = base[::2, 1::3]
    values["view"] = base.view(torch.int32)[2]
    values["expanded"] = torch.tensor([1.0, 2.0]).expand(3, 2)
    values["empty"] = torch.empty(0, 5)
    values["scalar"] = torch.tensor(3.5, dtype=torch.float64)
    values["conj"] = torch.tensor([1 + 2j]).conj()
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"v": values, "arr": np.arange(5)})
        target = {"v": None, "arr": None}
        assert ckpt.restore(target) == 1
    for k, t in values.items():
        r = target["v"][k]
        assert r.dtype == t.dtype and r.shape == t.shape, k
        assert torch.equal(bits(r), bits(t.resolve_conj())), k
    assert (target["arr"] == np.arange(5)).all()


def test_copies_made_for_a_blocking_save_or_a_reservation_are_not_kept(scratch):
    """A non-contiguous tensor or a lazy view is saved from a copy (on the
    GPU, for a CUDA tensor: memory the caching allocator would keep taken
    until the next save). A reservation, which only sizes the state, makes
    none; once a blocking save returned nothing reads its copies, and the
    checkpointer holds none: the encoder it keeps for the next save keeps
    only how it encoded."""
    base = torch.arange(4096.0).reshape(64, 64)
    state = {"t": base.t(), "arr": np.arange(3), "neg": torch.tensor([1.0, 2.0])._neg_view()}
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        copies = []
        contiguous, resolve_neg = torch.Tensor.contiguous, torch.Tensor.resolve_neg
        torch.Tensor.contiguous = lambda t, *a, **k: copies.append(t) or contiguous(t, *a, **k)
        torch.Tensor.resolve_neg = lambda t: copies.append(t) or resolve_neg(t)
        try:
            ckpt.reserve(state)  # sized without a copy
        finally:
            torch.Tensor.contiguous, torch.Tensor.resolve_neg = contiguous, resolve_neg
        assert not copies, f"{len(copies)} copies made to size a reservation"
        assert ckpt._encoded.keep == []
        ckpt.save(1, state)
        assert ckpt._keep == [] and ckpt._encoded.keep == []
        ckpt.save(2, state)  # encoded from the last save's records
        target = {"t": None, "arr": None, "neg": None}
        assert ckpt.restore(target) == 2
    assert torch.equal(target["t"], base.t()) and (target["arr"] == np.arange(3)).all()
    assert torch.equal(target["neg"], torch.tensor([-1.0, -2.0]))


@contextlib.contextmanager
def planner_calls():
    """The (step, items planned) of each call of the restore's planner while
    the block runs."""
    plans = []
    real = strata.torch._Planner.__call__

    def spy(self, step, key):
        out = real(self, step, key)
        plans.append((step, len(out)))
        return out

    strata.torch._Planner.__call__ = spy
    try:
        yield plans
    finally:
        strata.torch._Planner.__call__ = real


def test_restoring_through_the_arena_copies_items_as_they_verify(scratch):
    model, opt = make(width=256)
    train(model, opt, 2)
    expected = snapshot(model, opt)
    with strata.torch.Checkpointer(str(scratch), chunk_size=4096) as ckpt:
        ckpt.save(2, {"model": model, "optimizer": opt})
        m2, o2 = make(seed=4, width=256)
        train(m2, o2, 1)
        with planner_calls() as plans:
            assert ckpt.restore({"model": m2, "optimizer": o2}) == 2
        assert_state(m2, o2, expected)
        # Planned once, as soon as the tree was read; the stager then copied
        # every parameter, moment and step counter into its live tensor.
        assert plans == [(2, 4 * 4)], plans  # 4 params; moments and step of each
        assert ckpt._pipelined == 4 * 4, ckpt._pipelined


def test_a_corrupt_item_after_pipelined_copies_falls_back_cleanly(scratch):
    model, opt = make(width=256)
    train(model, opt, 1)
    at_1 = snapshot(model, opt)
    with strata.torch.Checkpointer(str(scratch), async_save=False, max_to_keep=3) as ckpt:
        ckpt.save(1, {"model": model, "optimizer": opt})
        train(model, opt, 1)
        ckpt.save(2, {"model": model, "optimizer": opt})
        # One of the biggest items, read last: smaller ones are copied by then.
        biggest = opt.state[next(model.parameters())]["exp_avg_sq"].numpy().tobytes()
    for victim in (scratch / "2").iterdir():
        raw = bytearray(victim.read_bytes())
        at = raw.find(biggest)
        if at >= 0:
            raw[at + 100] ^= 0xFF
            victim.write_bytes(bytes(raw))
            break
    else:
        raise AssertionError("exp_avg_sq's bytes are in no file of step 2")
    m2, o2 = make(seed=6, width=256)
    train(m2, o2, 1)
    with planner_calls() as plans, strata.torch.Checkpointer(str(scratch)) as ckpt:
        assert ckpt.restore({"model": m2, "optimizer": o2}) == 1
        assert ckpt._pipelined == 4 * 4
    # Step 2 was planned and some of it copied before its corrupt item; step
    # 1's bytes overwrote them.
    assert plans == [(2, 16), (1, 16)], plans
    assert_state(m2, o2, at_1)


def test_a_mismatch_loads_nothing_through_the_arena_either(scratch):
    model, opt = make(width=64)
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"model": model, "other": make(width=64)[0]})
        ckpt.wait()
        fresh, _ = make(seed=2, width=64)
        wrong, _ = make(seed=3, width=128)
        before = [p.clone() for p in fresh.parameters()]
        with pytest.raises(strata.InvalidArgumentError, match="tensor 'other.0.weight'"):
            ckpt.restore({"model": fresh, "other": wrong})
        assert ckpt._pipelined == 0
    assert all(torch.equal(a, b) for a, b in zip(before, fresh.parameters()))


def test_state_dicts_of_fresh_tensors_restore_through_the_arena(scratch):
    # RNGState.state_dict() makes new tensors on every call: the copies made
    # while reading went into tensors restore()'s own check does not use.
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        torch.manual_seed(5)
        ckpt.save(1, {"rng": strata.torch.RNGState()})
        expected = torch.rand(4)
        torch.manual_seed(6)
        assert ckpt.restore({"rng": strata.torch.RNGState()}) == 1
        assert torch.equal(torch.rand(4), expected)


def test_a_restored_plain_value_outlives_the_step_files_it_came_from(scratch):
    """A restore of plain values from a step whose files later saves recycle
    (the arrays it verified are views of them) copies what it keeps into
    memory of its own, in one block: the values stay as restored while the
    files are written again."""
    def values(seed):
        g = torch.Generator().manual_seed(seed)
        return {"w": torch.randn(512, 256, generator=g), "b": torch.randn(256, generator=g),
                "a": np.arange(100, dtype=np.int32) * seed, "n": seed}

    with strata.torch.Checkpointer(str(scratch), max_to_keep=2) as ckpt:
        ckpt.save(1, {"v": values(1)})
        ckpt.wait()
        restored = ckpt._ckpt.restore_planned(strata.torch.TREE_ITEM, lambda step, key: [])
        assert restored.lent  # the step files themselves: reused by later saves
        name = next(n for n in restored.items if n != strata.torch.TREE_ITEM)
        assert list(restored.owned_copy(["nope", name])) == [name]  # the step has no "nope"
        del restored
        target = {"v": None}
        assert ckpt.restore(target) == 1
        for step in range(2, 6):  # step 1's files are written again
            ckpt.save(step, {"v": values(step)})
            ckpt.wait()
        assert not (scratch / "1").exists()
    kept, expected = target["v"], values(1)
    assert torch.equal(kept["w"], expected["w"]) and torch.equal(kept["b"], expected["b"])
    assert np.array_equal(kept["a"], expected["a"]) and kept["n"] == 1


def unheld(step_dir):
    """Whether a save could take `step_dir`'s files now: nobody reading it
    holds its lock (engine/step_lock.h), as a save asks, without waiting."""
    fd = os.open(step_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_restart_holds_the_step_it_restores_only_while_it_reads_it(scratch):
    """After a restart a step is verified in a mapping of its files. While a
    Restored of it lives, its directory is locked against a save taking
    its files; what a restore keeps is copied out of them, so the lock goes
    with the restore and later saves recycle the files as usual, the values
    staying as restored."""
    def values(seed):
        g = torch.Generator().manual_seed(seed)
        return {"w": torch.randn(512, 256, generator=g), "n": seed}

    with strata.torch.Checkpointer(str(scratch), max_to_keep=2) as ckpt:
        for step in (1, 2):
            ckpt.save(step, {"v": values(step)})
            ckpt.wait()
    with strata.torch.Checkpointer(str(scratch), max_to_keep=2) as ckpt:  # a new process's
        restored = ckpt._ckpt.restore_planned(strata.torch.TREE_ITEM, lambda step, key: [])
        assert restored.step == 2 and restored.lent  # views of the step files
        assert not unheld(scratch / "2")
        del restored
        assert unheld(scratch / "2")
        target = {"v": None}
        assert ckpt.restore(target) == 2
        assert unheld(scratch / "2")
        for step in range(3, 7):
            ckpt.save(step, {"v": values(step)})
            ckpt.wait()
        assert not (scratch / "2").exists()
    kept, expected = target["v"], values(2)
    assert torch.equal(kept["w"], expected["w"]) and kept["n"] == 2


def test_restoring_through_the_arena_fills_the_live_tensors(scratch):
    model, opt = make()
    train(model, opt, 3)
    expected = snapshot(model, opt)
    plain = all_dtype_tensors()
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(3, {"model": model, "optimizer": opt, "plain": plain})
        m2, o2 = make(seed=9)
        train(m2, o2, 1)  # the optimizer has state to fill in place
        live = [p.data_ptr() for p in m2.parameters()] + \
            [t.data_ptr() for s in o2.state.values() for t in s.values()]
        target = {"model": m2, "optimizer": o2, "plain": None}
        assert ckpt.restore(target) == 3
        assert [p.data_ptr() for p in m2.parameters()] + \
            [t.data_ptr() for s in o2.state.values() for t in s.values()] == live
        assert_state(m2, o2, expected)
        # Nothing restored is a view of memory the next save reuses.
        ckpt.save(4, {"model": model, "optimizer": opt, "plain": {"x": torch.zeros(1 << 16)}})
        ckpt.wait()
        assert_state(m2, o2, expected)
        for k, t in plain.items():
            assert torch.equal(bits(target["plain"][k]), bits(t)), k
        # A fresh optimizer (no state yet) gets state of its own.
        m3, o3 = make(seed=3)
        assert ckpt.restore({"model": m3, "optimizer": o3}, step=3) == 3
        assert_state(m3, o3, expected)
        assert all(t.untyped_storage().resizable() for s in o3.state.values()
                   for t in s.values())


def test_a_mismatch_found_later_loads_nothing_into_live_tensors(scratch):
    model, opt = make()
    train(model, opt, 2)
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(2, {"model": model, "optimizer": opt, "extra": nn.Linear(2, 2)})
        m2, o2 = make(seed=4)
        train(m2, o2, 1)
        before = snapshot(m2, o2)
        with pytest.raises(strata.InvalidArgumentError, match="extra.weight"):
            ckpt.restore({"model": m2, "optimizer": o2, "extra": nn.Linear(3, 2)})
    assert_state(m2, o2, before)


def test_gpu_bench_runs_on_cpu(tmp_path):
    """The GPU benchmark's CPU path at a small size, so it keeps working,
    with the profile of each target row that a GPU run can ask for."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    profile = tmp_path / "profile.txt"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = subprocess.run([sys.executable, os.path.join(REPO, "bench", "gpu_bench.py"),
                          "--size-mib", "8", "--reps", "1", "--tmpfs", str(scratch),
                          "--device", "cpu", "--profile", str(profile)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    for state in ("linear", "transformer"):
        for ratio in ("save_blocking_warm_vs_d2h", "save_blocking_first_vs_d2h",
                      "save_to_committed_vs_d2h", "restore_vs_h2d", "dcp_load_vs_h2d"):
            assert f"ratio {state}_{ratio}" in out.stdout, out.stdout
    profiled = profile.read_text()
    for row in ("save -> committed", "restore() after a restart", "dcp.async_save returns",
                "dcp.load through Strata"):
        section = profiled.split(f"#### transformer: {row} (")[1].split("####")[0]
        assert "Ordered by: cumulative time" in section, profiled
    assert "StrataStorageReader.read_data" in profiled or "_dcp_reader.py" in profiled


# --- CUDA ---------------------------------------------------------------------

@needs_cuda
def test_cuda_blocking_save_copies_once_into_pinned_memory(scratch):
    values = {k: v for k, v in all_dtype_tensors("cuda").items()}
    base = torch.arange(4096, dtype=torch.float32, device="cuda").reshape(64, 64)
    values["transposed"] = base.t()
    values["strided"] = base[::3, 1::2]
    values["cpu"] = torch.arange(5)
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(1, {"v": values})
        base.add_(1)  # after save() returns: not in the checkpoint
        assert ckpt.staging_pinned
        target = {"v": None}
        assert ckpt.restore(target) == 1
    base.sub_(1)
    for k, t in values.items():
        assert torch.equal(bits(target["v"][k]), bits(t)), k


@needs_cuda
def test_cuda_overlapped_save_is_ordered_before_the_next_optimizer_step(scratch):
    model, opt = make("cuda", width=1024)
    train(model, opt, 2, "cuda")
    expected = snapshot(model, opt)
    with strata.torch.Checkpointer(str(scratch), overlap=True) as ckpt:
        ckpt.save(2, {"model": model, "optimizer": opt})
        train(model, opt, 1, "cuda")  # forward/backward alongside the copies; step() waits
        ckpt.wait()
        m2, o2 = make("cuda", seed=7, width=1024)
        train(m2, o2, 1, "cuda")
        assert ckpt.restore({"model": m2, "optimizer": o2}) == 2
    assert_state(m2, o2, expected)


@needs_cuda
def test_cuda_a_forgotten_wait_fails_the_save_instead_of_corrupting_it(scratch):
    model, opt = make("cuda", width=2048)
    train(model, opt, 1, "cuda")
    with strata.torch.Checkpointer(str(scratch), overlap=True) as ckpt:
        ckpt.save(1, {"model": model, "optimizer": opt})
        ckpt.wait()
        torch.cuda._sleep(500_000_000)  # keeps the copies queued behind the device's stream
        ckpt.save(2, {"model": model, "optimizer": opt})
        with torch.no_grad():
            next(model.parameters()).mul_(2)  # not through optimizer.step(), no wait_staged()
        with pytest.raises(strata.FailedPreconditionError, match="changed in place"):
            ckpt.wait()
        assert ckpt.restore({"model": make("cuda", width=2048)[0]}) == 1


@needs_cuda
def test_cuda_restore_lands_in_the_live_tensors(scratch):
    model, opt = make("cuda")
    train(model, opt, 3, "cuda")
    expected = snapshot(model, opt)
    with strata.torch.Checkpointer(str(scratch)) as ckpt:
        ckpt.save(3, {"model": model, "optimizer": opt})
        m2, o2 = make("cuda", seed=2)
        train(m2, o2, 1, "cuda")
        live = [p.data_ptr() for p in m2.parameters()]
        assert ckpt.restore({"model": m2, "optimizer": o2}) == 3
        assert [p.data_ptr() for p in m2.parameters()] == live
    assert_state(m2, o2, expected)


@needs_cuda
def test_cuda_several_devices_in_one_state(scratch):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA devices")
    values = {f"d{i}": torch.randn(1000, device=f"cuda:{i}") for i in range(2)}
    with strata.torch.Checkpointer(str(scratch), overlap=True) as ckpt:
        ckpt.save(1, {"v": values})
        target = {"v": None}
        assert ckpt.restore(target) == 1
    for k, t in values.items():
        assert torch.equal(target["v"][k], t.cpu())
