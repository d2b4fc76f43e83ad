"""A training state as Strata items and a JSON tree: what strata.torch
saves and how it is read back.

* _Encoder flattens a state into the items the stager copies (tensors and
  NumPy arrays, by address: python/src/stager.cc) and a JSON tree of
  everything else that names them. Nothing is pickled.
* _Decoder rebuilds values from the tree and the restored items, or, for
  planning a restore before the items are read, from the tree alone
  (placeholders on the "meta" device with each item's dtype and shape).
* _fit and _place pair what was saved with the live state it is restored
  into: DTensor layouts are checked, and each saved tensor with a live
  counterpart of the same shape and dtype is copied into it in place.
"""

import base64
import json
import math
import re
import sys
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy
import torch

import strata

# The item that holds the JSON tree of a checkpoint saved by this module.
TREE_ITEM = "__strata_torch_tree__"
_FORMAT = 1

# Every dtype of the running torch by the name the tree records (its name
# without "torch."), so a newer torch's dtypes need no change here.
# Quantized tensors are refused before their dtype matters.
_TORCH_DTYPES = {str(v).removeprefix("torch."): v for v in vars(torch).values()
                 if isinstance(v, torch.dtype)}
# Strata's own dtypes: a tensor of one of these is saved as that dtype (so
# `strata inspect` shows it); a tensor of any other dtype as its bytes.
_STRATA_DTYPES = {"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                  "uint64", "float16", "bfloat16", "float32", "float64"}
# An integer dtype of each element size. Tensors are copied as these bits:
# torch cannot copy some dtypes as themselves (uint4 and the other sub-byte
# dtypes have no copy kernel).
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _is_stateful(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None))


_DTENSOR: Any = None  # torch's DTensor class, once torch.distributed.tensor is imported


def _dtensor_class() -> Any:
    """torch's DTensor class once torch.distributed.tensor is imported (no
    DTensor exists before), else None."""
    global _DTENSOR
    if _DTENSOR is None:
        for module in ("torch.distributed.tensor", "torch.distributed._tensor"):  # 2.4+, older
            cls = getattr(sys.modules.get(module), "DTensor", None)
            if cls is not None:
                _DTENSOR = cls
                break
    return _DTENSOR


def _is_dtensor(value: Any) -> bool:
    cls = _dtensor_class()
    return cls is not None and isinstance(value, cls)


def _layout(d: Any) -> Dict[str, Any]:
    """What a DTensor's local shard is a part of, as the tree records it."""
    mesh = d.device_mesh
    coordinate = mesh.get_coordinate()  # None if this process is not in the mesh
    return {"placements": [repr(p) for p in d.placements], "mesh_shape": list(mesh.shape),
            "coordinate": None if coordinate is None else list(coordinate),
            "shape": list(d.shape), "stride": list(d.stride())}


def _sharded_coordinate(layout: Dict[str, Any]) -> List[int]:
    """The process's mesh coordinate along the dimensions the tensor is not
    replicated on: where its local shard lies in the whole."""
    coordinate = layout.get("coordinate") or []
    return [c for c, p in zip(coordinate, layout["placements"]) if p != "Replicate()"]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """`t` viewed as the integer dtype of its element size (same memory): torch
    cannot copy some dtypes as themselves (uint4 and the other sub-byte
    dtypes have no copy kernel). Wider elements (complex128) stay as they are."""
    size = t.element_size()
    return t.view(_BITS[size]) if size in _BITS else t


def _map_containers(node: Any, fn) -> Any:
    """`node` with `fn` applied to each element of a dict (of any dict type),
    list or plain tuple; any other value is returned as it is."""
    if isinstance(node, dict):
        pairs = [(k, fn(v)) for k, v in node.items()]
        return dict(pairs) if type(node) is dict else type(node)(pairs)
    if isinstance(node, list):
        return [fn(v) for v in node]
    if type(node) is tuple:
        return tuple(fn(v) for v in node)
    return node




# Values the tree holds as they are (JSON's own types), by exact type.
_PLAIN = {str, int, float, bool}
# What an item name may not contain (docs/format.md).
_NOT_A_NAME = re.compile("/|\\.\\.|\x00")
_STRIDED = torch.strided
# Tensor types encoded as tensors without asking whether they are DTensors.
_TENSORS = {torch.Tensor, torch.nn.Parameter}

# What the tree and the item record for each dtype: (tree name, item dtype).
_DTYPE_INFO: Dict[torch.dtype, Tuple[str, str]] = {}


def _dtype_info(dtype: torch.dtype) -> Tuple[str, str]:
    info = _DTYPE_INFO.get(dtype)
    if info is None:
        name = str(dtype).removeprefix("torch.")
        info = _DTYPE_INFO[dtype] = (name, name if name in _STRATA_DTYPES else "bytes")
    return info


# Spaces the tree item is padded with, to a multiple of this: its size, and
# so the layout of the step's files, stays the same from save to save (a
# new layout means setting the files up again). JSON ignores them.
_TREE_PAD = 4096


def tree_item(tree: Dict[str, Any]) -> numpy.ndarray:
    """The JSON tree as the bytes of its item, padded with spaces."""
    blob = json_dumps(tree)
    padded = (len(blob) + _TREE_PAD - 1) // _TREE_PAD * _TREE_PAD
    return numpy.frombuffer(blob + b" " * (padded - len(blob)), dtype=numpy.uint8)


def json_dumps(tree: Any) -> bytes:
    return json.dumps(tree, separators=(",", ":"), check_circular=False).encode()


class _Record(NamedTuple):
    """How one item of a save was encoded: its path in the state, and for a
    tensor saved from its own memory (ptr != 0) that memory, its dtype and
    shape, whether the dtype is complex, its tree node and its spec."""
    path: str
    ptr: int
    dtype: Any
    shape: Any
    complex: bool
    node: Any
    spec: Any


class _Encoder:
    """Flattens a state tree into the items of a save -- `specs` (name,
    item dtype, shape, bytes, CUDA device or -1, deferrable), their
    `pointers`, and the tensors and arrays to `keep` alive while they are
    copied -- and a JSON tree (everything else) that names them.

    A tensor is saved from its own memory: a view is resolved (conjugate,
    negative), a non-contiguous tensor made contiguous, a tensor on another
    accelerator than CUDA copied to the host first."""

    def __init__(self, previous: Optional["_Encoder"] = None, sizing: bool = False) -> None:
        # `sizing`: only the specs are wanted (a reservation): no copy is
        # made of a tensor that would be saved from one (a lazy view, a
        # non-contiguous tensor: on the GPU, memory the step may not have),
        # and its pointer is not one to copy from.
        self.sizing = sizing
        self.names: set = {TREE_ITEM}
        self.specs: List[Tuple[str, str, List[int], int, int, bool]] = []
        self.pointers: List[int] = []
        self.keep: List[Any] = []
        self.deferred: List[torch.Tensor] = []  # deferrable tensors as given (their _version)
        self.devices: set = set()
        # Set by the caller per entry: which CUDA tensors encoded now an
        # overlapped save may still copy after save() returns.
        self.deferrable = None
        # One _Record per named item, in order, for the next save's encoder.
        self.records: List[_Record] = []
        # The previous save's records while this state is laid out as it was
        # (every item so far at the same path): a tensor whose memory, dtype
        # and shape are the ones recorded is then encoded as it was, without
        # asking torch the rest. None once anything differs: the rest is
        # encoded afresh, as the whole state would be.
        self._previous = previous.records if previous is not None else None
        self._named = 0  # specs[:_named] are in `names`
        self.tree: Any = None  # the tree and its item, set by the caller
        self.tree_item: Optional[numpy.ndarray] = None

    def _same_path(self, path: str) -> Optional["_Record"]:
        """The previous save's record of the next item if it had `path` (and
        the layout so far was the same); else stops using the records."""
        previous = self._previous
        if previous is not None:
            i = len(self.records)
            if i < len(previous) and previous[i].path == path:
                return previous[i]
            self._previous = None
        return None

    def _as_before(self, t: torch.Tensor, path: str) -> Optional[Dict[str, Any]]:
        """`t`'s tree node, as the previous save encoded the item at `path`,
        when that was `t`'s own memory with `t`'s dtype and shape (the spec,
        name and node are then the record's; the bytes are read at the save,
        as always). None otherwise: the caller encodes `t`, and the records
        are used no more unless the item was a copy (ptr 0) at the same
        path."""
        previous = self._previous  # _same_path(path), inline: it runs per tensor
        i = len(self.records)
        if i >= len(previous) or previous[i].path != path:
            self._previous = None
            return None
        record = previous[i]
        ptr = record.ptr
        if not ptr:
            return None
        spec = record.spec
        cuda = spec[4] >= 0
        if t.data_ptr() != ptr or t.dtype is not record.dtype or t.shape != record.shape or \
                not t.is_contiguous() or t.is_neg() or (record.complex and t.is_conj()) or \
                not (t.is_cuda if cuda else t.is_cpu):
            self._previous = None
            return None
        if cuda:
            deferrable = self.deferrable is not None and bool(self.deferrable(t))
            if deferrable != spec[5]:
                self._previous = None
                return None
            if deferrable:
                self.deferred.append(t)
            self.devices.add(spec[4])
        self.specs.append(spec)
        self.pointers.append(ptr)
        self.keep.append(t)
        self.records.append(record)
        return record.node

    def _item_name(self, path: str) -> str:
        """`path` as an item name (docs/format.md's rules), made unique."""
        if self._named < len(self.specs):  # names _as_before took
            self.names.update(spec[0] for spec in self.specs[self._named:])
            self._named = len(self.specs)
        if _NOT_A_NAME.search(path) is None and 0 < len(path) <= 250 and path != ".":
            name = path
        elif _NOT_A_NAME.search(path) is None and path and path != "." and \
                len(path.encode()) <= 1000:
            name = path
        else:
            name = f"item{len(self.specs)}"
        if name in self.names:
            base, n = name, 1
            while name in self.names:
                name, n = f"{base}#{n}", n + 1
        self.names.add(name)
        return name

    def tensor(self, t: torch.Tensor, path: str) -> Dict[str, Any]:
        """The tree node of a tensor, and its item. The item is the tensor's
        own memory (only its address is taken) unless it is a lazy view, not
        contiguous or on another accelerator than CUDA: then a copy."""
        if self._previous is not None:
            node = self._as_before(t, path)
            if node is not None:
                return node
        dtype = t.dtype
        if t.layout is not _STRIDED or t.is_quantized:
            raise TypeError(f"cannot save {path}: only dense tensors are supported")
        source = t
        tree_dtype, item_dtype = _dtype_info(dtype)
        if (t.is_conj() or t.is_neg()) and not self.sizing:  # lazy views: a float can be neg
            with torch.no_grad():
                t = t.resolve_conj().resolve_neg()
        name = self._item_name(path)
        shape = list(t.shape)
        device = -1
        if t.is_cuda:
            device = t.get_device()
            self.devices.add(device)
        elif not t.is_cpu and not self.sizing:
            with torch.no_grad():
                t = _bits(t).cpu()  # another accelerator: through host memory
        if not t.is_contiguous() and not self.sizing:
            with torch.no_grad():
                t = _bits(t).contiguous()  # as integers: some dtypes have no copy kernel
        nbytes = t.nbytes
        deferrable = device >= 0 and self.deferrable is not None and self.deferrable(source)
        if deferrable:
            self.deferred.append(source)
        spec = (name, item_dtype, shape if item_dtype != "bytes" else [nbytes], nbytes, device,
                deferrable)
        self.specs.append(spec)
        self.pointers.append(t.data_ptr())
        self.keep.append(t)
        node = {"$tensor": name, "dtype": tree_dtype, "shape": shape}
        direct = t is source  # saved from its own memory, not from a copy
        self.records.append(_Record(path, t.data_ptr() if direct else 0, dtype, source.shape,
                                    dtype.is_complex, node, spec))
        return node

    def array(self, a: numpy.ndarray, path: str, scalar: bool = False) -> Dict[str, Any]:
        if a.dtype.hasobject or a.dtype.fields is not None:
            raise TypeError(f"cannot save {path}: NumPy arrays of Python objects or of "
                            "structured dtypes are not supported")
        shape = list(a.shape)  # ascontiguousarray makes 0-d arrays 1-d
        flat = numpy.ascontiguousarray(a).reshape(-1).view(numpy.uint8)
        node = {"$array": self.host(flat, path), "dtype": a.dtype.str, "shape": shape}
        if scalar:
            node["scalar"] = True
        return node

    def host(self, flat: numpy.ndarray, path: str) -> str:
        """Adds the bytes of a contiguous uint8 array as an item; its name."""
        if path != TREE_ITEM:
            self._same_path(path)
            self.records.append(_Record(path, 0, None, None, False, None, None))
        name = path if path == TREE_ITEM else self._item_name(path)
        self.specs.append((name, "bytes", [flat.nbytes], flat.nbytes, -1, False))
        self.pointers.append(flat.__array_interface__["data"][0])
        self.keep.append(flat)
        return name

    def encode(self, value: Any, path: str) -> Any:
        kind = type(value)
        if kind in _PLAIN or value is None:
            return value
        if kind in _TENSORS:
            return self.tensor(value, path)
        if kind is dict:
            return {"$dict": [[k if type(k) in _PLAIN else self.encode(k, f"{path}.<key>"),
                               v if type(v) in _PLAIN or v is None else
                               self.tensor(v, f"{path}.{k}") if type(v) in _TENSORS else
                               self.encode(v, f"{path}.{k}")] for k, v in value.items()]}
        if (kind is list or kind is tuple) and all(type(v) in _PLAIN for v in value):
            return {"$list" if kind is list else "$tuple": list(value)}
        if isinstance(value, torch.Tensor):
            if _is_dtensor(value):
                return {"$dtensor": self.tensor(value.to_local(), path), **_layout(value)}
            return self.tensor(value, path)
        if isinstance(value, numpy.ndarray):
            return self.array(value, path)
        if isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, numpy.generic):  # a NumPy scalar keeps its type
            return self.array(numpy.asarray(value), path, scalar=True)
        if isinstance(value, (bytes, bytearray)):
            return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
        if isinstance(value, dict):
            return {"$dict": [[k if type(k) in _PLAIN else self.encode(k, f"{path}.<key>"),
                               self.tensor(v, f"{path}.{k}") if type(v) in _TENSORS else
                               self.encode(v, f"{path}.{k}")] for k, v in value.items()]}
        if isinstance(value, (list, tuple)):
            tag = "$list" if isinstance(value, list) else "$tuple"
            return {tag: [self.encode(v, f"{path}.{i}") for i, v in enumerate(value)]}
        if isinstance(value, torch.dtype):
            return {"$torch_dtype": str(value).removeprefix("torch.")}
        raise TypeError(f"cannot save {path}: {type(value).__name__} is not supported "
                        "(tensors, arrays, numbers, strings, bytes, None, and dicts, lists "
                        "and tuples of them)")


class _SavedDTensor:
    """A DTensor as decoded: its local shard and the layout it had. _fit
    makes it a DTensor again, on the mesh of the DTensor it is restored into."""

    def __init__(self, local: torch.Tensor, layout: Dict[str, Any]) -> None:
        self.local, self.layout = local, layout


class _Placeholder:
    """A saved tensor not read yet, as a restore is planned: its item, dtype
    and shape, enough for _fit and _place to pair it with a live tensor."""
    __slots__ = ("name", "dtype", "shape")
    is_meta = True

    def __init__(self, name: str, dtype: torch.dtype, shape: torch.Size) -> None:
        self.name, self.dtype, self.shape = name, dtype, shape

    def numel(self) -> int:
        return math.prod(self.shape)


class _PlaceholderDTensor:
    """A saved DTensor not read yet: its local shard's placeholder and the
    DTensor it is to be laid out like."""
    __slots__ = ("local", "like")

    def __init__(self, local: _Placeholder, like: Any) -> None:
        self.local, self.like = local, like


class _ArrayPlaceholder:
    """A saved NumPy array not read yet: its tree node."""
    __slots__ = ("node",)

    def __init__(self, node: Dict[str, Any]) -> None:
        self.node = node


_SAVED = (torch.Tensor, _Placeholder)
# Saved tensors that are not DTensors, by exact type.
_LEAVES = {torch.Tensor, _Placeholder}


class _Decoder:
    """Rebuilds values from a JSON tree and the restored items. Tensors are
    views over the restored memory, or with `copy`, own their memory. With
    `items` None (a restore being planned: nothing is read yet), a tensor is
    a _Placeholder naming its item."""

    def __init__(self, items: Optional[Dict[str, Any]], step: int, copy: bool) -> None:
        self.items, self.step, self.copy = items, step, copy

    def decode(self, node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        if "$tensor" in node:
            return self.tensor(node)
        if "$dtensor" in node:
            return _SavedDTensor(self.tensor(node["$dtensor"]), node)
        if "$array" in node:
            if self.items is None:
                return _ArrayPlaceholder(node)  # read once the items are in
            raw = self.items[node["$array"]]
            a = raw.view(numpy.dtype(node["dtype"])).reshape(node["shape"])
            if self.copy:
                a = a.copy()
            return a[()] if node.get("scalar") else a
        if "$bytes" in node:
            return base64.b64decode(node["$bytes"])
        if "$dict" in node:
            return {self.decode(k): self.decode(v) for k, v in node["$dict"]}
        if "$list" in node:
            return [self.decode(v) for v in node["$list"]]
        if "$tuple" in node:
            return tuple(self.decode(v) for v in node["$tuple"])
        if "$torch_dtype" in node:
            if node["$torch_dtype"] not in _TORCH_DTYPES:
                raise strata.DataLossError(f"step {self.step}: dtype {node['$torch_dtype']} "
                                           f"is not known to torch {torch.__version__}")
            return _TORCH_DTYPES[node["$torch_dtype"]]
        raise strata.DataLossError(f"step {self.step}: unknown node in the state tree: "
                                   f"{sorted(node)}")

    def tensor(self, node: Dict[str, Any]) -> torch.Tensor:
        """The tensor of a $tensor node. Whatever Strata dtype its item has
        (the tensor's own, or bytes), the item's bytes are the tensor's."""
        name, dtype, shape = node["$tensor"], _TORCH_DTYPES.get(node["dtype"]), node["shape"]
        if self.items is None and dtype is not None:
            return _Placeholder(name, dtype, torch.Size(shape))
        if self.items is None or name not in self.items or dtype is None:
            raise strata.DataLossError(
                f"step {self.step}: tensor item '{name}' ({node['dtype']}) is missing or has "
                f"a dtype torch {torch.__version__} does not know")
        raw = torch.from_numpy(self.items[name].reshape(-1).view(numpy.uint8))
        if self.copy:
            raw = raw.clone()
        try:
            if raw.numel() == 0:  # torch will not view an empty byte tensor as wider elements
                t = torch.empty(shape, dtype=dtype)
                if t.numel() == 0:
                    return t
            return raw.view(dtype).reshape(shape)
        except RuntimeError as e:
            raise strata.DataLossError(
                f"step {self.step}: tensor item '{name}' ({raw.numel()} bytes) does not hold "
                f"{node['dtype']}{shape}: {e}") from None


class _LikeParam:
    """Stands for the state an optimizer has not created yet for a DTensor
    parameter: DTensors restored into it are laid out like the parameter."""

    def __init__(self, param: torch.Tensor) -> None:
        self.param = param


def _target_state(obj: Any) -> Any:
    """obj.state_dict(), for _fit. An optimizer's state for a DTensor parameter
    it has not stepped yet is the parameter's stand-in."""
    state = obj.state_dict()
    if isinstance(obj, torch.optim.Optimizer):
        params = [p for group in obj.param_groups for p in group["params"]]
        for i, p in enumerate(params):  # state_dict() numbers them in this order
            if _is_dtensor(p) and i not in state["state"]:
                state["state"][i] = _LikeParam(p)
    return state


def _child(target: Any, key: Any) -> Any:
    """The part of `target` at `key`, or None."""
    if isinstance(target, _LikeParam):
        return target
    if isinstance(target, dict):
        return target.get(key)
    if isinstance(target, (list, tuple)) and isinstance(key, int) and key < len(target):
        return target[key]
    return None


def _fit(saved: Any, target: Any, path: str, step: int, check: bool) -> Any:
    """`saved` ready to load into `target`, with its DTensors rebuilt on the
    target's meshes. Raises InvalidArgumentError naming the first path where
    the two do not fit: a DTensor that is not laid out the same way, or with
    `check`, a tensor whose shape or dtype differs."""
    if type(saved) in _LEAVES and type(target) in _TENSORS:  # the common case, quickly
        if check and (saved.shape != target.shape or saved.dtype != target.dtype):
            raise _misfit(saved, target, path, step)
        return saved
    if isinstance(target, _LikeParam) and not isinstance(saved, (dict, list, tuple)):
        target = target.param if isinstance(saved, _SavedDTensor) else None
    if isinstance(saved, _SavedDTensor):
        return _fit_dtensor(saved, target, path, step)
    if isinstance(saved, dict):
        return {k: _fit(v, _child(target, k), f"{path}.{k}", step, check)
                for k, v in saved.items()}
    if isinstance(saved, (list, tuple)):
        return type(saved)(_fit(v, _child(target, i), f"{path}.{i}", step, check)
                           for i, v in enumerate(saved))
    if check and isinstance(saved, _SAVED) and isinstance(target, torch.Tensor):
        if _is_dtensor(target):
            raise strata.InvalidArgumentError(
                f"step {step}: '{path}' is a tensor in the checkpoint but a DTensor here")
        if saved.shape != target.shape or saved.dtype != target.dtype:
            raise _misfit(saved, target, path, step)
    return saved


def _misfit(saved: Any, target: torch.Tensor, path: str, step: int) -> Exception:
    """The error for a saved tensor whose shape or dtype is not the live one's."""
    return strata.InvalidArgumentError(
        f"step {step}: tensor '{path}' is {str(saved.dtype)[6:]}{list(saved.shape)} "
        f"in the checkpoint but {str(target.dtype)[6:]}{list(target.shape)} here")


_LAYOUT_FIELDS = (("placements", "placements"), ("mesh_shape", "device mesh shape"),
                  ("shape", "global shape"), ("stride", "global stride"))


def _fit_dtensor(saved: _SavedDTensor, target: Any, path: str, step: int) -> Any:
    layout = saved.layout
    if not _is_dtensor(target):
        here = "nothing" if target is None else f"a {type(target).__name__}"
        raise strata.InvalidArgumentError(
            f"step {step}: '{path}' is a DTensor in the checkpoint (placements "
            f"{layout['placements']}, global shape {layout['shape']}) but {here} here; "
            "restore it into a DTensor laid out the same way")
    here = _layout(target)
    for field, what in _LAYOUT_FIELDS:
        if layout[field] != here[field]:
            raise strata.InvalidArgumentError(
                f"step {step}: DTensor '{path}' has {what} {layout[field]} in the checkpoint "
                f"but {here[field]} here")
    if _sharded_coordinate(layout) != _sharded_coordinate(here):
        raise strata.InvalidArgumentError(
            f"step {step}: DTensor '{path}' was saved by the process at mesh coordinate "
            f"{layout['coordinate']}, not by this one ({here['coordinate']}): its local "
            "shard is another part of the tensor")
    local = _fit(saved.local, target.to_local(), path, step, check=True)
    if isinstance(local, _Placeholder):
        return _PlaceholderDTensor(local, target)
    return _like(local, target)


def _like(local: torch.Tensor, target: Any) -> Any:
    """`local` as the local shard of a DTensor laid out as `target`."""
    return type(target).from_local(local, target.device_mesh, target.placements,
                                   shape=target.shape, stride=target.stride(), run_check=False)


def _place(saved: Any, live: Any, copy: bool,
           copies: List[Tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """`saved` (fitted) with each tensor that has a live counterpart of the
    same shape and dtype replaced by that live tensor, the pair appended to
    `copies`; every other tensor cloned when `copy`."""
    if type(saved) in _LEAVES and type(live) in _TENSORS and saved.shape == live.shape and \
            saved.dtype == live.dtype and live.layout is _STRIDED:  # the common case, quickly
        copies.append((live, saved))
        return live
    if isinstance(saved, dict):
        return {k: _place(v, _child(live, k), copy, copies) for k, v in saved.items()}
    if isinstance(saved, (list, tuple)):
        return type(saved)(_place(v, _child(live, i), copy, copies) for i, v in enumerate(saved))
    if isinstance(saved, _PlaceholderDTensor):
        if _is_dtensor(live):
            src, dst = saved.local, live.to_local()
            if src.shape == dst.shape and src.dtype == dst.dtype and dst.layout == torch.strided:
                copies.append((dst, src))
                return live
        return saved
    if not isinstance(saved, _SAVED):
        return saved
    if isinstance(live, torch.Tensor) and _is_dtensor(saved) == _is_dtensor(live):
        src = saved.to_local() if _is_dtensor(saved) else saved
        dst = live.to_local() if _is_dtensor(live) else live
        if src.shape == dst.shape and src.dtype == dst.dtype and dst.layout == torch.strided:
            copies.append((dst, src))
            return live
    if copy and not _is_dtensor(saved):
        return saved.clone()
    return saved


def _plan(node: Any, live: Any, path: str, decoder: _Decoder,
          pairs: List[Tuple[torch.Tensor, Any]], generic: List[int]) -> Any:
    """What _place(_fit(decoder.decode(node), live, path, step, check=True),
    live, False, pairs) returns for a restore being planned (`decoder` has no
    items), in one walk over the saved tree and the live state instead of
    three: a saved tensor with a live strided tensor of its shape and dtype
    is that live tensor, (live, its item's name) appended to `pairs` (the
    placeholder's dtype and shape would be the live tensor's); a dtype or
    shape that differs raises as _fit does. Any other node (a
    DTensor, an array, bytes, a dtype, a tensor whose live counterpart is
    missing or not a plain strided tensor, a key that is no plain value)
    takes the three steps, counted in generic[0]: while that stays 0, the
    value holds no placeholder, and _materialize has nothing to resolve;
    the pairs _place appends have a _Placeholder."""
    if type(node) is not dict:
        return node
    if "$tensor" in node:
        dtype = _TORCH_DTYPES.get(node["dtype"])
        if dtype is not None and type(live) in _TENSORS and live.layout is _STRIDED:
            shape = live.shape  # a torch.Size is a tuple: equal to the saved one or not
            if shape != tuple(node["shape"]) or dtype != live.dtype:
                saved = _Placeholder(node["$tensor"], dtype, torch.Size(node["shape"]))
                raise _misfit(saved, live, path, decoder.step)
            pairs.append((live, node["$tensor"]))
            return live
    elif "$dict" in node:
        out = {}
        for k, v in node["$dict"]:
            if type(k) is dict:  # a key that is no plain value: rare; may be a placeholder
                generic[0] += 1
                k = decoder.decode(k)
            child = live.get(k) if type(live) is dict else _child(live, k)
            # The "$tensor" case above, the common one, without a call or a
            # path; anything else, a misfit included (which raises naming its
            # path), takes the call below.
            if type(v) is dict and "$tensor" in v and type(child) in _TENSORS and \
                    child.layout is _STRIDED and \
                    _TORCH_DTYPES.get(v["dtype"]) is child.dtype and \
                    child.shape == tuple(v["shape"]):
                pairs.append((child, v["$tensor"]))
                out[k] = child
                continue
            out[k] = _plan(v, child, f"{path}.{k}", decoder, pairs, generic)
        return out
    elif "$list" in node:
        return [_plan(v, _child(live, i), f"{path}.{i}", decoder, pairs, generic)
                for i, v in enumerate(node["$list"])]
    elif "$tuple" in node:
        return tuple(_plan(v, _child(live, i), f"{path}.{i}", decoder, pairs, generic)
                     for i, v in enumerate(node["$tuple"]))
    generic[0] += 1
    fitted = _fit(decoder.decode(node), live, path, decoder.step, check=True)
    return _place(fitted, live, False, pairs)


class _Unplanned(Exception):
    """A placeholder _materialize cannot resolve (restore() then decodes
    the entry again from the restored items)."""


def _placeholder_items(value: Any, names: List[str]) -> None:
    """Appends to `names` the item of each placeholder in `value` (as the
    plan left it), in order."""
    if isinstance(value, _Placeholder):
        names.append(value.name)
    elif isinstance(value, _PlaceholderDTensor):
        _placeholder_items(value.local, names)
    elif isinstance(value, _ArrayPlaceholder):
        names.append(value.node["$array"])
    elif type(value) is dict:
        for v in value.values():
            _placeholder_items(v, names)
    elif type(value) in (list, tuple):
        for v in value:
            _placeholder_items(v, names)


def _materialize(value: Any, items: Dict[str, numpy.ndarray], step: int, copy: bool) -> Any:
    """`value` as a planned restore left it (placeholders for the tensors
    that were not copied into a live tensor) with each placeholder replaced
    by its restored tensor: a view of the restored memory, or with `copy`,
    a tensor of its own."""
    if isinstance(value, _Placeholder):
        node = {"$tensor": value.name, "dtype": str(value.dtype).removeprefix("torch."),
                "shape": list(value.shape)}
        return _Decoder(items, step, copy).tensor(node)
    if isinstance(value, _PlaceholderDTensor):
        return _like(_materialize(value.local, items, step, copy), value.like)
    if isinstance(value, _ArrayPlaceholder):
        return _Decoder(items, step, copy).decode(value.node)
    if type(value) is dict:
        return {k: _materialize(v, items, step, copy) for k, v in value.items()}
    if type(value) is list:
        return [_materialize(v, items, step, copy) for v in value]
    if type(value) is tuple:
        return tuple(_materialize(v, items, step, copy) for v in value)
    if isinstance(value, (dict, list, tuple)):
        raise _Unplanned()  # a container type the plan did not make
    return value
