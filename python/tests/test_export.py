"""strata.export: a strata.dcp step out to a DCP filesystem checkpoint and
to safetensors, loaded back with the real libraries and compared bit for
bit; and a DCP filesystem checkpoint imported as a Strata step. (The
two-rank gather is in test_dcp.py: test_local_directories_without_an_agent.)
"""

import pytest
import torch
import torch.distributed.checkpoint as dcp

import strata.export
from strata.dcp import StrataStorageReader, StrataStorageWriter


def _state():
    g = torch.Generator().manual_seed(3)
    return {"w": torch.randn(5, 3, generator=g),
            "half": torch.randn(4, generator=g).to(torch.bfloat16),
            "ids": torch.arange(6, dtype=torch.int64).reshape(2, 3),
            "f8": torch.randn(8, generator=g).to(torch.float8_e4m3fn),
            "extra": {"epoch": 3, "name": "x"}}


def _bits(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def _save(directory: str, step: int) -> dict:
    saved = _state()
    writer = StrataStorageWriter(directory)
    dcp.save(saved, storage_writer=writer, checkpoint_id=step, no_dist=True)
    writer.close()
    return saved


def test_export_to_dcp_and_safetensors_loads_with_the_real_libraries(scratch):
    d = str(scratch / "strata")
    saved = _save(d, 3)
    _save(d, 5)  # the newest; step 3 is asked for by number
    out = str(scratch / "dcp-out")
    assert strata.export.export_dcp(d, out, 3) == 3
    target = {"w": torch.zeros(5, 3), "half": torch.zeros(4, dtype=torch.bfloat16),
              "ids": torch.zeros(2, 3, dtype=torch.int64),
              "f8": torch.zeros(8, dtype=torch.float8_e4m3fn), "extra": {"epoch": 0, "name": ""}}
    dcp.load(target, storage_reader=dcp.FileSystemReader(out), no_dist=True)
    for k in ("w", "half", "ids", "f8"):
        assert target[k].dtype == saved[k].dtype and _bits(target[k]) == _bits(saved[k]), k
    assert target["extra"] == saved["extra"]

    st_torch = pytest.importorskip("safetensors.torch")  # pinned in requirements.lock
    st = str(scratch / "st-out")
    assert strata.export.main(["safetensors", d, st, "--step", "3"]) == 0
    tensors = st_torch.load_file(f"{st}/model.safetensors")
    assert sorted(tensors) == ["f8", "half", "ids", "w"]
    for k, v in tensors.items():
        assert v.dtype == saved[k].dtype and _bits(v) == _bits(saved[k]), k
    with st_torch.safe_open(f"{st}/model.safetensors", "pt") as f:
        assert f.metadata() == {"strata_step": "3", "left_out": "extra.epoch,extra.name"}


def test_a_dcp_checkpoint_imports_as_a_strata_step(scratch):
    src = str(scratch / "dcp-src")
    saved = _state()
    dcp.save(saved, storage_writer=dcp.FileSystemWriter(src), no_dist=True)
    d = str(scratch / "strata")
    assert strata.export.main(["import", src, d, "--step", "7"]) == 0
    reader = StrataStorageReader(d)
    assert reader.step == 7
    target = {"w": torch.zeros(5, 3), "half": torch.zeros(4, dtype=torch.bfloat16),
              "ids": torch.zeros(2, 3, dtype=torch.int64),
              "f8": torch.zeros(8, dtype=torch.float8_e4m3fn), "extra": {"epoch": 0, "name": ""}}
    dcp.load(target, storage_reader=reader, no_dist=True)
    for k in ("w", "half", "ids", "f8"):
        assert _bits(target[k]) == _bits(saved[k]), k
    assert target["extra"] == saved["extra"]
