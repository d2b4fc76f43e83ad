"""strata.torch.stage_state_dict(): the snapshot of a state dict's tensors in
a reusable, page-locked host arena that StrataStorageWriter.stage() gives
DCP's async save, and the layout it reuses while the tensors are the same
ones. The CUDA test is skipped without a CUDA device; scripts/gpu-check.sh
runs it on a GPU machine."""

import pytest
import torch

import strata
import strata._arena
import strata.torch

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device (scripts/gpu-check.sh)")


def bits(t):
    t = t.detach().cpu()
    return strata.torch._bits(t).contiguous().reshape(-1).view(torch.uint8)


def test_stage_state_dict_snapshots_into_the_arena_until_the_next_call():
    sd = {"a": torch.arange(10, dtype=torch.float32), "nested": {"b": torch.ones(3, 4).t()},
          "list": [torch.tensor([1, 2], dtype=torch.int16), 5, "x"],
          "tup": (torch.tensor(True),), "bf16": torch.randn(7).to(torch.bfloat16),
          "f8": torch.tensor([1.0, -2.0]).to(torch.float8_e4m3fn), "none": None}
    expect = {k: v for k, v in sd.items()}
    staged = strata.torch.stage_state_dict(sd)
    sd["a"].add_(100)  # the caller may change the originals at once
    assert torch.equal(staged["a"], torch.arange(10, dtype=torch.float32))
    assert staged["nested"]["b"].shape == (4, 3) and staged["nested"]["b"].is_contiguous()
    assert staged["list"][1:] == [5, "x"] and staged["none"] is None
    assert isinstance(staged["tup"], tuple) and staged["tup"][0].item() is True
    for key in ("bf16", "f8"):
        assert staged[key].dtype == expect[key].dtype
        assert torch.equal(bits(staged[key]), bits(expect[key]))
    arena = strata._arena._arena
    assert staged["a"].untyped_storage().data_ptr() == arena.buffer.data_ptr()
    assert staged["a"].is_pinned() == CUDA
    staged2 = strata.torch.stage_state_dict({"z": torch.full((10,), 9.0)})
    assert torch.equal(staged2["z"], torch.full((10,), 9.0))
    assert torch.equal(staged["a"], torch.full((10,), 9.0))  # reused: invalid after the next call
    strata.torch.release_staged()
    assert arena.nbytes == 0


def test_stage_state_dict_reuses_its_layout_while_the_tensors_are_the_same_ones():
    """A state staged again with the same tensors (a fresh state_dict() of
    the same model) reuses the views of the last call and only copies
    again; a tensor replaced, resized or re-typed, another order, or one
    that had to be copied first (not contiguous) makes a new layout."""
    strata.torch.release_staged()
    w, b = torch.arange(12, dtype=torch.float32).reshape(3, 4), torch.zeros(4)
    first = strata.torch.stage_state_dict({"w": w, "b": b, "n": 3})
    w.add_(1)
    again = strata.torch.stage_state_dict({"w": w, "b": b, "n": 3})
    assert again["w"] is first["w"] and again["b"] is first["b"]  # the same views
    assert torch.equal(again["w"], w) and again["n"] == 3  # the copy was made again

    def staged_anew(sd):
        before = strata._arena._last
        out = strata.torch.stage_state_dict(sd)
        for k, v in sd.items():
            assert torch.equal(out[k], v) and out[k].dtype == v.dtype, k
        return strata._arena._last is not before

    w2 = w.clone()
    assert staged_anew({"w": w2, "b": b})  # replaced (other memory)
    w2.resize_(2, 4)
    assert staged_anew({"w": w2, "b": b})  # resized in place
    assert staged_anew({"w": w2.view(torch.int32), "b": b})  # re-typed
    assert staged_anew({"b": b, "w": w2})  # another order
    assert not staged_anew({"b": b, "w": w2})  # the same again
    t = torch.arange(6.0).reshape(2, 3).t()  # copied to a contiguous block first
    assert staged_anew({"t": t}) and strata._arena._last is None
    t.add_(1)
    staged_anew({"t": t})  # checks the values
    assert strata._arena._last is None
    strata.torch.release_staged()
    assert strata._arena._last is None


@needs_cuda
def test_cuda_stage_state_dict_from_several_devices():
    devices = [f"cuda:{i}" for i in range(min(torch.cuda.device_count(), 4))]
    sd = {d: torch.arange(1000, dtype=torch.bfloat16, device=d) + i
          for i, d in enumerate(devices)}
    staged = strata.torch.stage_state_dict(sd)
    for d, t in sd.items():
        assert staged[d].device.type == "cpu" and staged[d].is_pinned()
        assert torch.equal(staged[d], t.cpu())
