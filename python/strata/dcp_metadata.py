"""DCP's Metadata as JSON: what strata.dcp stores in every rank's step, and
decodes without running any code from it.

DCP keeps its `Metadata` (the global layout of a checkpoint: every tensor's
dtype, global size and chunks, which items are bytes, the flattening map)
pickled. Bytes that come from a peer or a backup must not be able to run
code in the trainer that restores them, so strata.dcp stores it as one JSON
object (the item `__strata_dcp__`) and rebuilds DCP's dataclasses from
plain values, checking every field's type:

    {"format": "strata-dcp", "version": 2, "step": 4, "rank": 0, "world_size": 4,
     "metadata": {
       "version": "1.0.0",                       # DCP's checkpoint version
       "state_dict": [                           # in DCP's order
         ["model.w", {"tensor": {"dtype": "float32", "size": [7, 3],
                                 "layout": "strided", "requires_grad": false,
                                 "memory_format": "contiguous_format",
                                 "pin_memory": false, "strides": [3, 1],
                                 "chunks": [[[0, 0], [2, 3]], ...]}}],
         ["optim.param_groups.0.lr", {"bytes": {}}]],
       "planner_data": {"model.w": ["model", "w"], ...},   # DCP's flattening map, or null
       "storage_meta": {"checkpoint_id": ..., "save_id": ..., "load_id": ...,
                        "modules": [...]},                 # or null
       "storage_data": [["model.w", [0, 0], "model.w@0,0", [0]], ...]}}

`storage_data` lists each MetadataIndex (fqn, chunk offsets or null) with
the Strata item that holds it and the saved ranks whose steps have it.
Anything else -- a pickle (format 1, or bytes put there by someone else),
malformed JSON, an unknown dtype -- is refused with DataLossError, as any
corrupt step is.
"""

import dataclasses
import json
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata,
                                                   Metadata, MetadataIndex, StorageMeta,
                                                   TensorProperties, TensorStorageMetadata)

import strata

__all__ = ["FORMAT", "VERSION", "decode", "encode"]

FORMAT = "strata-dcp"
VERSION = 2

_MEMORY_FORMATS = {"contiguous_format": torch.contiguous_format,
                   "channels_last": torch.channels_last,
                   "preserve_format": torch.preserve_format}
_LAYOUTS = {"strided": torch.strided, "sparse_coo": torch.sparse_coo}
_PROPERTIES_HAVE_STRIDES = "strides" in {f.name for f in dataclasses.fields(TensorProperties)}


class _Refused(Exception):
    """A field that is not what the format says (turned into DataLossError)."""


# ---- encoding -----------------------------------------------------------------

def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _name_of(table: Dict[str, Any], value: Any, what: str) -> str:
    for name, v in table.items():
        if v == value:
            return name
    raise strata.InvalidArgumentError(f"strata.dcp cannot store the {what} {value!r}")


def _ints(values: Any) -> List[int]:
    return [int(v) for v in values]


def _encode_storage(md: Any) -> Dict[str, Any]:
    if isinstance(md, BytesStorageMetadata):
        return {"bytes": {}}
    p = md.properties
    return {"tensor": {
        "dtype": _dtype_name(p.dtype), "size": _ints(md.size),
        "layout": _name_of(_LAYOUTS, p.layout, "layout"),
        "requires_grad": bool(p.requires_grad),
        "memory_format": _name_of(_MEMORY_FORMATS, p.memory_format, "memory format"),
        "pin_memory": bool(p.pin_memory),
        "strides": None if getattr(p, "strides", None) is None else _ints(p.strides),
        "chunks": [[_ints(c.offsets), _ints(c.sizes)] for c in md.chunks]}}


def _encode_planner_data(data: Any) -> Optional[Dict[str, List[Any]]]:
    """DCP's flattening map (fqn -> path of str and int keys), or None when
    the planner left something else there (nothing DCP's loading needs)."""
    if not isinstance(data, dict):
        return None
    out = {}
    for fqn, path in data.items():
        if not isinstance(fqn, str) or not isinstance(path, (tuple, list)) or not all(
                isinstance(k, str) or (isinstance(k, int) and not isinstance(k, bool))
                for k in path):
            return None
        out[fqn] = list(path)
    return out


def _encode_storage_meta(meta: Optional[StorageMeta]) -> Optional[Dict[str, Any]]:
    if meta is None:
        return None
    text = lambda v: None if v is None else str(v)  # noqa: E731
    return {"checkpoint_id": text(meta.checkpoint_id), "save_id": text(meta.save_id),
            "load_id": text(meta.load_id), "modules": [str(m) for m in meta.modules]}


def encode(metadata: Metadata, *, step: int, rank: int, world_size: int,
           locations: Dict[MetadataIndex, Tuple[str, Tuple[int, ...]]]) -> bytes:
    """The JSON of `metadata` as saved rank `rank` of `world_size` stores it
    in its step `step`; `locations` maps each index to (item, holder ranks)."""
    storage_data = [[index.fqn, None if index.offset is None else _ints(index.offset), item,
                     _ints(ranks)] for index, (item, ranks) in locations.items()]
    doc = {"format": FORMAT, "version": VERSION, "step": int(step), "rank": int(rank),
           "world_size": int(world_size),
           "metadata": {
               "version": metadata.version,
               "state_dict": [[fqn, _encode_storage(md)]
                              for fqn, md in metadata.state_dict_metadata.items()],
               "planner_data": _encode_planner_data(metadata.planner_data),
               "storage_meta": _encode_storage_meta(metadata.storage_meta),
               "storage_data": storage_data}}
    return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()


# ---- decoding: plain values only, every field checked ------------------------------

def _want(value: Any, kind: Any, what: str) -> Any:
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise _Refused(f"{what} is {type(value).__name__}, not {getattr(kind, '__name__', kind)}")
    return value


def _int_list(value: Any, what: str) -> List[int]:
    return [_want(v, int, what) for v in _want(value, list, what)]


def _opt_str(value: Any, what: str) -> Optional[str]:
    return None if value is None else _want(value, str, what)


def _keys(doc: Dict[str, Any], required: Tuple[str, ...], what: str) -> None:
    missing = [k for k in required if k not in doc]
    if missing:
        raise _Refused(f"{what} lacks {missing}")


def _decode_tensor(t: Any, fqn: str) -> TensorStorageMetadata:
    what = f"tensor '{fqn}'"
    _want(t, dict, what)
    _keys(t, ("dtype", "size", "layout", "requires_grad", "memory_format", "pin_memory",
              "strides", "chunks"), what)
    dtype = getattr(torch, _want(t["dtype"], str, what + " dtype"), None)
    if not isinstance(dtype, torch.dtype):
        raise _Refused(f"{what} has dtype {t['dtype']!r}, which torch {torch.__version__} lacks")
    if t["layout"] not in _LAYOUTS or t["memory_format"] not in _MEMORY_FORMATS:
        raise _Refused(f"{what} has layout {t['layout']!r}, memory format "
                       f"{t['memory_format']!r}")
    fields = dict(
        dtype=dtype, layout=_LAYOUTS[t["layout"]],
        requires_grad=_want(t["requires_grad"], bool, what),
        memory_format=_MEMORY_FORMATS[t["memory_format"]],
        pin_memory=_want(t["pin_memory"], bool, what))
    strides = None if t["strides"] is None else tuple(_int_list(t["strides"], what))
    if _PROPERTIES_HAVE_STRIDES:  # an older torch (2.11) keeps none: they are dropped
        fields["strides"] = strides
    properties = TensorProperties(**fields)
    chunks = []
    for chunk in _want(t["chunks"], list, what):
        if not isinstance(chunk, list) or len(chunk) != 2:
            raise _Refused(f"{what} has a chunk that is not [offsets, sizes]")
        chunks.append(ChunkStorageMetadata(offsets=torch.Size(_int_list(chunk[0], what)),
                                           sizes=torch.Size(_int_list(chunk[1], what))))
    return TensorStorageMetadata(properties=properties,
                                 size=torch.Size(_int_list(t["size"], what)), chunks=chunks)


def _decode_state_dict(entries: Any) -> Dict[str, Any]:
    out = {}
    for entry in _want(entries, list, "state_dict"):
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], dict):
            raise _Refused("a state_dict entry is not [fqn, {kind: ...}]")
        fqn = _want(entry[0], str, "an fqn")
        if "bytes" in entry[1] and len(entry[1]) == 1:
            out[fqn] = BytesStorageMetadata()
        elif "tensor" in entry[1] and len(entry[1]) == 1:
            out[fqn] = _decode_tensor(entry[1]["tensor"], fqn)
        else:
            raise _Refused(f"'{fqn}' is neither a tensor nor bytes")
    return out


def _decode_planner_data(data: Any) -> Optional[Dict[str, Tuple[Any, ...]]]:
    if data is None:
        return None
    out = {}
    for fqn, path in _want(data, dict, "planner_data").items():
        keys = _want(path, list, f"planner_data '{fqn}'")
        for k in keys:
            if not isinstance(k, str):
                _want(k, int, f"planner_data '{fqn}'")
        out[fqn] = tuple(keys)
    return out


def _decode_storage_meta(meta: Any) -> Optional[StorageMeta]:
    if meta is None:
        return None
    _want(meta, dict, "storage_meta")
    _keys(meta, ("checkpoint_id", "save_id", "load_id", "modules"), "storage_meta")
    return StorageMeta(checkpoint_id=_opt_str(meta["checkpoint_id"], "checkpoint_id"),
                       save_id=_opt_str(meta["save_id"], "save_id"),
                       load_id=_opt_str(meta["load_id"], "load_id"),
                       modules=[_want(m, str, "a module") for m in
                                _want(meta["modules"], list, "modules")])


def _decode_storage_data(rows: Any) -> Dict[MetadataIndex, Tuple[str, Tuple[int, ...]]]:
    out = {}
    for row in _want(rows, list, "storage_data"):
        if not isinstance(row, list) or len(row) != 4:
            raise _Refused("a storage_data row is not [fqn, offsets, item, ranks]")
        fqn = _want(row[0], str, "an fqn")
        offset = None if row[1] is None else torch.Size(_int_list(row[1], fqn))
        ranks = tuple(_int_list(row[3], fqn))
        out[MetadataIndex(fqn, offset)] = (_want(row[2], str, fqn), ranks)
    return out


def _decode(blob: bytes) -> Dict[str, Any]:
    if blob[:1] == b"\x80":
        raise _Refused("it is a pickle (strata.dcp format 1, or bytes put there by someone "
                       "else); strata.dcp does not unpickle")
    try:
        doc = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _Refused(f"it is not JSON ({type(e).__name__})") from None
    _want(doc, dict, "the document")
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise _Refused(f"its format is {doc.get('format')!r} version {doc.get('version')!r}, "
                       f"not {FORMAT!r} version {VERSION}")
    _keys(doc, ("step", "rank", "world_size", "metadata"), "the document")
    md = _want(doc["metadata"], dict, "metadata")
    _keys(md, ("version", "state_dict", "planner_data", "storage_meta", "storage_data"),
          "metadata")
    metadata = Metadata(state_dict_metadata=_decode_state_dict(md["state_dict"]),
                        planner_data=_decode_planner_data(md["planner_data"]),
                        storage_data=_decode_storage_data(md["storage_data"]),
                        storage_meta=_decode_storage_meta(md["storage_meta"]),
                        version=_opt_str(md["version"], "version"))
    return {"step": _want(doc["step"], int, "step"), "rank": _want(doc["rank"], int, "rank"),
            "world_size": _want(doc["world_size"], int, "world_size"), "metadata": metadata}


def decode(blob: bytes, where: str) -> Dict[str, Any]:
    """{"step", "rank", "world_size", "metadata"} from an item `encode`
    wrote; `where` names the step for the error. Runs no code from `blob`:
    anything else raises DataLossError saying what it is."""
    try:
        return _decode(bytes(blob))
    except _Refused as e:
        raise strata.DataLossError(
            f"{where}: the DCP metadata item is refused: {e}") from None
