"""How strata.dcp names and converts DCP's write and read items: the Strata
item of a MetadataIndex, a tensor or BytesIO as a value a Strata step
holds and back, and the step a checkpoint_id names."""

import hashlib
import io
import os
import re
from typing import Any

import numpy
import torch
from torch.distributed.checkpoint.metadata import MetadataIndex

import strata
from strata._dcp_copies import METADATA_ITEM

_NUMPY_DTYPES = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                 torch.uint16, torch.uint32, torch.uint64, torch.float16, torch.float32,
                 torch.float64}


def _item_name(index: MetadataIndex) -> str:
    """The Strata item of a write item: `fqn` (bytes, 0-d tensors), or
    `fqn@o0,o1,...` for the tensor chunk at those offsets."""
    name = index.fqn if not index.offset else \
        f"{index.fqn}@{','.join(str(o) for o in index.offset)}"
    if ("/" in name or ".." in name or "\0" in name or name in ("", ".")
            or name.startswith(METADATA_ITEM) or len(name.encode()) > 1000):
        return _hashed_name(index)
    return name


def _hashed_name(index: MetadataIndex) -> str:
    offset = None if index.offset is None else tuple(index.offset)
    return "item-" + hashlib.sha1(repr((index.fqn, offset)).encode()).hexdigest()


def _to_item(data: Any) -> Any:
    """A tensor or BytesIO as a value for strata.Checkpointer.save."""
    if isinstance(data, io.BytesIO):
        return data.getvalue(), "bytes"
    t = data.detach().resolve_conj().resolve_neg()
    t = (t if t.device.type == "cpu" else t.cpu()).contiguous()
    if t.dtype in _NUMPY_DTYPES:
        return t.numpy()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy(), "bfloat16"
    return t.reshape(-1).view(torch.uint8).numpy(), "bytes"


def _nbytes(value: Any) -> int:
    data = value[0] if isinstance(value, tuple) else value
    return len(data) if isinstance(data, bytes) else data.nbytes


def _from_item(array: numpy.ndarray, dtype: torch.dtype, sizes: torch.Size) -> torch.Tensor:
    """A restored item's bytes as a tensor of `dtype` and `sizes`."""
    raw = torch.from_numpy(numpy.ascontiguousarray(array).reshape(-1).view(numpy.uint8))
    return raw.view(dtype).reshape(sizes)


def _narrow(t: torch.Tensor, offsets: torch.Size, lengths: torch.Size) -> torch.Tensor:
    for dim, (offset, length) in enumerate(zip(offsets, lengths)):
        t = t.narrow(dim, offset, length)
    return t


def _parse_step(checkpoint_id: Any) -> int:
    """The step a checkpoint_id names: an int, "N", or a path ending in
    "N" or "step-N" (TorchTitan's folders)."""
    if isinstance(checkpoint_id, int) and checkpoint_id >= 0:
        return checkpoint_id
    m = re.fullmatch(r"(?:step[-_]?)?(\d+)", os.path.basename(os.fspath(str(checkpoint_id))))
    if m is None:
        raise strata.InvalidArgumentError(
            f"checkpoint_id {checkpoint_id!r} names no step: pass the step (an int, 'N' or "
            "a path ending in 'step-N')")
    return int(m.group(1))
