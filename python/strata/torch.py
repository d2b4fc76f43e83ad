"""Save and restore PyTorch training state with Strata.

    import strata.torch

    ckpt = strata.torch.Checkpointer(dir, save_interval_steps=100,
                                     exit_after_ondemand=True)
    state = {"model": model, "optimizer": optimizer, "scheduler": scheduler,
             "rng": strata.torch.RNGState(), "loader": {"epoch": 0, "batch": 0}}
    step = ckpt.restore(state)   # None: nothing saved, start fresh

`state` maps names to entries of two kinds:

* stateful objects: anything with state_dict() and load_state_dict() (modules,
  optimizers, LR schedulers, GradScaler, RNGState, your own), and
  torch.Generator (get_state/set_state). Restore loads into them in place.
* plain values: nested dicts, lists and tuples of tensors, NumPy arrays,
  numbers, strings, bytes and None. Restore replaces `state[name]` with the
  restored value.

Tensors of every dtype the running torch has (float8, uint16, complex32,
...) are saved by name with their dtype and shape, copied once into a
reusable host arena (page-locked when CUDA is present: a GPU tensor takes
one device->host copy on a stream of Strata's own) that the engine writes
from directly (a borrowed save; no pickling, no second copy). save()
returns once that copy is done, so training may change the tensors at
once; with overlap=True it returns once the copies are enqueued and the
optimizers' next step() waits for them (see save()). A DTensor is saved as this process's local shard with its
layout, and restored into a DTensor laid out the same way. Everything else
is kept as a small JSON tree that restore decodes without running any code:
nothing is unpickled.
"""

import base64
import json
import random
import sys
import threading
import warnings
import weakref
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy
import torch

import strata

__all__ = ["Checkpointer", "RNGState", "TREE_ITEM", "stage_state_dict", "release_staged"]

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
# The RNGState keys that are not device types.
_HOST_GENERATORS = ("python", "numpy", "torch")


def _device_module(kind: str) -> Any:
    """torch's module for a device type (torch.cuda, torch.xpu, ...), or None."""
    try:
        if hasattr(torch, "get_device_module"):
            return torch.get_device_module(kind)
        return getattr(torch, kind, None)
    except (AttributeError, RuntimeError):  # a device type this torch does not know
        return None


def _device_generators() -> Dict[str, Any]:
    """Device type -> its torch module, for every device type present here
    whose generators torch exposes: CUDA, XPU and MPS, and the accelerator
    torch.accelerator reports (which may be another, e.g. a plug-in's)."""
    kinds = ["cuda", "xpu", "mps"]
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        kinds.insert(0, accelerator.current_accelerator().type)
    found = {}
    for kind in dict.fromkeys(kinds):
        module = _device_module(kind)
        available = getattr(module, "is_available", None)
        if callable(getattr(module, "get_rng_state", None)) and callable(available) \
                and available():
            found[kind] = module
    return found


def _get_device_states(module: Any) -> List[torch.Tensor]:
    if hasattr(module, "get_rng_state_all"):
        return module.get_rng_state_all()
    return [module.get_rng_state()]  # one device (MPS)


def _device_count(module: Any) -> int:
    return module.device_count() if hasattr(module, "device_count") else 1


def _set_device_states(module: Any, states: List[torch.Tensor]) -> None:
    if hasattr(module, "set_rng_state_all"):
        module.set_rng_state_all(states)  # devices 0..len(states)-1
    elif states:
        module.set_rng_state(states[0])


class RNGState:
    """The process's global random generators as one stateful entry: Python's
    `random`, NumPy's global generator, torch's CPU generator, and the
    generators of every device of every device type present (CUDA, XPU, MPS,
    the accelerator torch reports), one list per device type.

    Restoring generators of a device type this process does not have, or of
    more devices than it has, restores the others and warns (RuntimeWarning)
    about the ones left out; it never fails for that.
    """

    def state_dict(self) -> Dict[str, Any]:
        out = {"python": random.getstate(), "numpy": numpy.random.get_state(),
               "torch": torch.get_rng_state()}
        for kind, module in _device_generators().items():
            out[kind] = _get_device_states(module)
        return out

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        random.setstate(state["python"])
        numpy.random.set_state(state["numpy"])
        torch.set_rng_state(state["torch"])
        here = _device_generators()
        for kind, states in state.items():
            if kind in _HOST_GENERATORS:
                continue
            module = here.get(kind)
            count = 0 if module is None else _device_count(module)
            if len(states) > count:
                warnings.warn(f"RNGState: the checkpoint has the generator states of "
                              f"{len(states)} {kind} device(s), this process has {count} "
                              f"{kind} device(s): the states of the others are not restored",
                              RuntimeWarning, stacklevel=2)
            if count:
                _set_device_states(module, states[:count])


def _is_stateful(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None))


def _dtensor_class() -> Any:
    """torch's DTensor class once torch.distributed.tensor is imported (no
    DTensor exists before), else None."""
    for module in ("torch.distributed.tensor", "torch.distributed._tensor"):  # 2.4+, older
        cls = getattr(sys.modules.get(module), "DTensor", None)
        if cls is not None:
            return cls
    return None


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


# The NumPy dtype of each element size, to hand the engine an item of the
# tensor's shape (the engine checks the element size of the dtype named).
_NUMPY_BITS = {1: numpy.uint8, 2: numpy.int16, 4: numpy.int32, 8: numpy.int64}
_ALIGN = 64  # every item starts on a 64-byte boundary of the arena
_warned_unpinned = False


class _Source:
    """A tensor waiting to be staged: `bits` (its data, any device, any
    strides) and how its item is saved."""

    __slots__ = ("bits", "dtype", "tensor", "path", "deferrable", "version")

    def __init__(self, bits: torch.Tensor, dtype: str, tensor: torch.Tensor, path: str,
                 deferrable: bool) -> None:
        self.bits, self.dtype, self.tensor, self.path = bits, dtype, tensor, path
        self.deferrable = deferrable
        self.version = tensor._version  # in-place changes bump it (overlapped saves check it)


class _Arena:
    """Host memory that staged tensors are copied into and the engine writes
    from: one uint8 tensor, allocated on first use, grown (never shrunk) when
    a state needs more, reused by every later save and restore. Page-locked
    (pinned) when CUDA is available, so device<->host copies run at full
    speed and asynchronously; when pinning fails it is ordinary memory (the
    copies are then slower and synchronous) and a RuntimeWarning says so once
    per process."""

    def __init__(self) -> None:
        self.buffer: Optional[torch.Tensor] = None
        self.array: Optional[numpy.ndarray] = None  # the same memory, for the engine
        self.pinned = False

    @property
    def nbytes(self) -> int:
        return 0 if self.buffer is None else self.buffer.numel()

    def ensure(self, nbytes: int) -> None:
        if nbytes <= self.nbytes:
            return
        nbytes = (max(nbytes, 1) + (1 << 16) - 1) & ~((1 << 16) - 1)
        self.buffer = self.array = None  # free the old one first
        pinned = False
        if torch.cuda.is_available():
            try:
                self.buffer = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
                pinned = True
            except RuntimeError as e:
                global _warned_unpinned
                if not _warned_unpinned:
                    _warned_unpinned = True
                    warnings.warn(f"strata.torch: cannot pin {nbytes} bytes of host memory "
                                  f"({e}); staging in pageable memory, device copies will be "
                                  "slower and synchronous", RuntimeWarning, stacklevel=4)
        if self.buffer is None:
            self.buffer = torch.empty(nbytes, dtype=torch.uint8)
        self.pinned = pinned
        self.array = self.buffer.numpy()

    def release(self) -> None:
        self.buffer = self.array = None
        self.pinned = False


class _Pending:
    """Device->host copies enqueued by an overlapped save: an event per device
    recorded after them, and the tensors they read with the version each had.
    Until ordered() has made the devices' current streams wait for the
    events, an in-place change of one of those tensors may race with its
    copy: check() then raises rather than let such a copy be committed."""

    def __init__(self, events: Dict[torch.device, Any], sources: List[_Source]) -> None:
        self.events, self.sources = events, sources
        self.ordered_at = False
        self.error: Optional[str] = None
        self.lock = threading.Lock()

    def changed(self) -> List[str]:
        return [s.path for s in self.sources if s.tensor._version != s.version]

    def order(self) -> None:
        """Orders every later kernel of the devices' current streams after the
        copies (no host wait). Idempotent."""
        with self.lock:
            if self.ordered_at:
                return
            changed = self.changed()
            if changed:
                self.error = (f"{', '.join(changed[:5])} changed in place after save() returned "
                              "and before its staging copy was ordered (call wait_staged() "
                              "before changing saved tensors outside optimizer.step())")
            for device, event in self.events.items():
                torch.cuda.current_stream(device).wait_event(event)
            self.ordered_at = True

    def ready(self) -> None:
        """The engine's SaveOptions::ready: returns once the copies are done;
        raises (the save then fails) if a copied tensor may have changed
        under its copy."""
        for event in self.events.values():
            event.synchronize()
        with self.lock:
            if not self.ordered_at:
                changed = self.changed()  # a change that raced with the copy is visible now
                if changed:
                    self.error = (f"{', '.join(changed[:5])} changed in place after save() "
                                  "returned and before its staging copy was done (call "
                                  "wait_staged() before changing saved tensors outside "
                                  "optimizer.step())")
            if self.error:
                raise RuntimeError(self.error)


class _Stager:
    """Copies tensors and arrays into an _Arena: CPU ones at once (torch's
    copy, in place), CUDA ones with one non_blocking device->host copy each on
    a stream of our own per device, ordered after the device's current
    stream (stream.wait_stream), so the copy sees every kernel enqueued
    before it that writes the tensor."""

    def __init__(self) -> None:
        self.arena = _Arena()
        self.offsets: Dict[str, int] = {}  # of the last stage(): name -> offset in the arena
        self._streams: Dict[torch.device, Any] = {}

    def _stream(self, device: torch.device) -> Any:
        stream = self._streams.get(device)
        if stream is None:
            stream = self._streams[device] = torch.cuda.Stream(device=device)
        return stream

    def stage(self, items: Dict[str, Any], defer: bool) -> Tuple[Dict[str, Any], _Pending]:
        """Copies every _Source and array of `items` into the arena and
        returns (the items as the engine takes them, the copies still in
        flight). Without `defer` every copy is complete on return; with it,
        the deferrable sources' copies may still run (wait with the _Pending:
        ready() on the host, order() on the devices)."""
        layout, total = [], 0
        for name, value in items.items():
            if isinstance(value, _Source):
                nbytes = value.bits.numel() * value.bits.element_size()
            elif isinstance(value, numpy.ndarray):
                nbytes = value.nbytes
            else:
                continue
            layout.append((name, value, total, nbytes))
            total += (nbytes + _ALIGN - 1) & ~(_ALIGN - 1)
        self.arena.ensure(total)
        self.offsets = {name: offset for name, _, offset, _ in layout}
        buffer, array = self.arena.buffer, self.arena.array
        out = dict(items)
        later, now = [], []  # (device, destination, source)
        for name, value, offset, nbytes in layout:
            if isinstance(value, numpy.ndarray):
                array[offset:offset + nbytes] = value
                out[name] = (array[offset:offset + nbytes], "bytes")
                continue
            bits = value.bits
            if nbytes:
                dst = buffer[offset:offset + nbytes].view(bits.dtype).view(bits.shape)
                if bits.is_cuda:
                    (later if defer and value.deferrable else now).append((value, dst))
                else:
                    dst.copy_(bits)
            raw = array[offset:offset + nbytes]
            if value.dtype == "bytes":
                out[name] = (raw, "bytes")
            else:
                out[name] = (raw.view(_NUMPY_BITS[bits.element_size()]).reshape(bits.shape),
                             value.dtype)
        now_events = self._copy(now)
        for event in now_events.values():
            event.synchronize()
        return out, _Pending(self._copy(later), [v for v, _ in later])

    def _copy(self, copies: List[Tuple[_Source, torch.Tensor]]) -> Dict[torch.device, Any]:
        """Enqueues the device->host copies; returns an event per device
        recorded after them."""
        events, waited = {}, set()
        for value, dst in copies:
            device = value.bits.device
            stream = self._stream(device)
            if device not in waited:
                stream.wait_stream(torch.cuda.current_stream(device))
                waited.add(device)
            with torch.cuda.stream(stream):
                dst.copy_(value.bits, non_blocking=True)
            # The caching allocator must not hand the source's memory to
            # another tensor before the copy on our stream has read it.
            value.bits.record_stream(stream)
        for device in waited:
            event = torch.cuda.Event()
            event.record(self._streams[device])
            events[device] = event
        return events


_stage_lock = threading.Lock()
_default_stager: Optional[_Stager] = None


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


def stage_state_dict(state_dict: Any) -> Any:
    """Snapshots the tensors of a (flat or nested) state_dict into a reusable
    host arena, page-locked when CUDA is available: one device->host copy per
    GPU tensor on a stream of Strata's own, ordered after each device's
    current stream; CPU tensors are copied too.

    Returns the same structure (dicts, lists, tuples) with every tensor
    replaced by a CPU tensor of its dtype and shape over the arena (a
    DTensor by a DTensor over its staged local shard, same mesh and
    placements; other values are returned as they are). When it returns,
    every copy is complete: the caller may change the originals at once.

    The returned tensors stay valid until the next stage_state_dict() call
    or release_staged(), which reuse or free the arena: finish reading them
    (e.g. writing them out) first, and do not keep them. One arena per
    process, shared by all callers of this function (not by
    strata.torch.Checkpointer, which has its own); thread-safe, callers take
    turns."""
    global _default_stager
    with _stage_lock:
        if _default_stager is None:
            _default_stager = _Stager()
        stager = _default_stager
        sources: Dict[str, _Source] = {}

        def collect(value: Any) -> Any:
            if _is_dtensor(value):
                return _StagedDTensor(value, collect(value.to_local()))
            if isinstance(value, torch.Tensor):
                t = value.detach().resolve_conj().resolve_neg()
                if t.layout != torch.strided or t.is_quantized:
                    raise TypeError("stage_state_dict: only dense tensors are supported")
                name = f"t{len(sources)}"
                sources[name] = _Source(_bits(t), "bytes", value, name, False)
                return _StagedTensor(name, t.dtype, tuple(t.shape))
            return _map_containers(value, collect)

        plan = collect(state_dict)
        stager.stage(sources, defer=False)
        buffer = stager.arena.buffer

        def build(node: Any) -> Any:
            if isinstance(node, _StagedTensor):
                bits = sources[node.name].bits
                n = bits.numel() * bits.element_size()
                if n == 0:
                    return torch.empty(node.shape, dtype=node.dtype)
                offset = stager.offsets[node.name]
                raw = buffer[offset:offset + n]
                return raw.view(bits.dtype).view(bits.shape).view(node.dtype)
            if isinstance(node, _StagedDTensor):
                d = node.dtensor
                return type(d).from_local(build(node.local), d.device_mesh, d.placements,
                                          shape=d.shape, stride=d.stride(), run_check=False)
            return _map_containers(node, build)

        return build(plan)


class _StagedTensor:
    __slots__ = ("name", "dtype", "shape")

    def __init__(self, name: str, dtype: torch.dtype, shape: Tuple[int, ...]) -> None:
        self.name, self.dtype, self.shape = name, dtype, shape


class _StagedDTensor:
    __slots__ = ("dtensor", "local")

    def __init__(self, dtensor: Any, local: Any) -> None:
        self.dtensor, self.local = dtensor, local


def release_staged() -> None:
    """Frees stage_state_dict()'s arena; the tensors it returned become invalid."""
    with _stage_lock:
        if _default_stager is not None:
            _default_stager.arena.release()



class _Encoder:
    """Flattens a state tree into Strata items (tensors and arrays, by
    reference) and a JSON tree (everything else) that names them."""

    def __init__(self) -> None:
        # name -> the item: a buffer, (buffer, dtype), or until staged, a
        # _Source (tensors) or a uint8 array (NumPy arrays): _Stager.stage
        # replaces those by views of its arena.
        self.items: Dict[str, Any] = {}
        # Set by the caller per entry: tensors encoded now may be copied
        # after save() returns (overlapped saves; see _Stager).
        self.deferrable = None

    def _item_name(self, path: str) -> str:
        name = path if ("/" not in path and ".." not in path and "\0" not in path
                        and path != "." and 0 < len(path.encode()) <= 1000) \
            else f"item{len(self.items)}"
        base, n = name, 1
        while name in self.items or name == TREE_ITEM:
            name, n = f"{base}#{n}", n + 1
        return name

    def tensor(self, t: torch.Tensor, path: str) -> Dict[str, Any]:
        if t.layout != torch.strided or t.is_quantized:
            raise TypeError(f"cannot save {path}: only dense tensors are supported")
        source = t
        t = t.detach().resolve_conj().resolve_neg()  # lazy conjugate/negative views
        dtype = str(t.dtype).removeprefix("torch.")
        name = self._item_name(path)
        deferrable = self.deferrable is not None and t.is_cuda and self.deferrable(source)
        self.items[name] = _Source(_bits(t), dtype if dtype in _STRATA_DTYPES else "bytes",
                                   source, path, deferrable)
        return {"$tensor": name, "dtype": dtype, "shape": list(t.shape)}

    def array(self, a: numpy.ndarray, path: str, scalar: bool = False) -> Dict[str, Any]:
        if a.dtype.hasobject or a.dtype.fields is not None:
            raise TypeError(f"cannot save {path}: NumPy arrays of Python objects or of "
                            "structured dtypes are not supported")
        shape = list(a.shape)  # ascontiguousarray makes 0-d arrays 1-d
        flat = numpy.ascontiguousarray(a).reshape(-1)
        name = self._item_name(path)
        self.items[name] = flat.view(numpy.uint8)  # copied into the arena by _Stager.stage
        node = {"$array": name, "dtype": a.dtype.str, "shape": shape}
        if scalar:
            node["scalar"] = True
        return node

    def encode(self, value: Any, path: str) -> Any:
        if _is_dtensor(value):  # before Tensor: a DTensor is one
            return {"$dtensor": self.tensor(value.to_local(), path), **_layout(value)}
        if isinstance(value, torch.Tensor):
            return self.tensor(value, path)
        if isinstance(value, numpy.ndarray):
            return self.array(value, path)
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, numpy.generic):  # a NumPy scalar keeps its type
            return self.array(numpy.asarray(value), path, scalar=True)
        if isinstance(value, (bytes, bytearray)):
            return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
        if isinstance(value, dict):
            return {"$dict": [[self.encode(k, f"{path}.<key>"), self.encode(v, f"{path}.{k}")]
                              for k, v in value.items()]}
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


class _Decoder:
    """Rebuilds values from a JSON tree and the restored items. Tensors are
    views over the restored memory, or with `copy`, own their memory."""

    def __init__(self, items: Dict[str, Any], step: int, copy: bool) -> None:
        self.items, self.step, self.copy = items, step, copy

    def decode(self, node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        if "$tensor" in node:
            return self.tensor(node)
        if "$dtensor" in node:
            return _SavedDTensor(self.tensor(node["$dtensor"]), node)
        if "$array" in node:
            raw = self.items[node["$array"]]
            a = raw.view(numpy.dtype(node["dtype"])).reshape(node["shape"])
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
        if name not in self.items or dtype is None:
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
    if check and isinstance(saved, torch.Tensor) and isinstance(target, torch.Tensor):
        if _is_dtensor(target):
            raise strata.InvalidArgumentError(
                f"step {step}: '{path}' is a tensor in the checkpoint but a DTensor here")
        if saved.shape != target.shape or saved.dtype != target.dtype:
            raise strata.InvalidArgumentError(
                f"step {step}: tensor '{path}' is {str(saved.dtype)[6:]}{list(saved.shape)} "
                f"in the checkpoint but {str(target.dtype)[6:]}{list(target.shape)} here")
    return saved


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
    return type(target).from_local(local, target.device_mesh, target.placements,
                                   shape=target.shape, stride=target.stride(),
                                   run_check=False)


def _place(saved: Any, live: Any, copy: bool,
           copies: List[Tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """`saved` (fitted) with each tensor that has a live counterpart of the
    same shape and dtype replaced by that live tensor, the pair appended to
    `copies`; every other tensor cloned when `copy`."""
    if isinstance(saved, dict):
        return {k: _place(v, _child(live, k), copy, copies) for k, v in saved.items()}
    if isinstance(saved, (list, tuple)):
        return type(saved)(_place(v, _child(live, i), copy, copies) for i, v in enumerate(saved))
    if not isinstance(saved, torch.Tensor):
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


def _copy_into(copies: List[Tuple[torch.Tensor, torch.Tensor]], pinned: bool,
               done: Any = ()) -> None:
    """Copies restored host tensors into live tensors: CPU ones at once, CUDA
    ones as host->device copies on the devices' current streams
    (non_blocking from page-locked memory), then waits for those, so the
    host memory may be reused when this returns. Pairs in `done` (keyed by
    _pair_key) were copied already."""
    devices = set()
    with torch.no_grad():
        for dst, src in copies:
            if dst.is_cuda:
                devices.add(dst.device)
            if src.numel() and _pair_key(dst, src) not in done:
                _bits(dst).copy_(_bits(src), non_blocking=pinned and dst.is_cuda)
    for device in devices:
        torch.cuda.current_stream(device).synchronize()


def _pair_key(dst: torch.Tensor, src: torch.Tensor) -> Tuple[int, int, int]:
    return dst.data_ptr(), src.data_ptr(), src.numel() * src.element_size()


class _Pipeline:
    """The copies of a restore into the arena that start while the rest of
    the step is still being read and verified.

    The engine reports each item once its bytes are verified (smallest
    first, so the state tree comes early). When the tree is in, the state
    is checked against it without loading or cloning anything, which says
    which item lands in which live tensor; from then on each reported item
    is copied into its live tensors at once: host->device on a stream of our
    own per device (ordered after the caller's current stream), CPU tensors
    in the reporting thread. Nothing is copied unless the whole state fits
    the tree, so a mismatch still loads nothing. restore() then checks and
    loads as without it, skipping the pairs copied here (same step, same
    memory). If the step then fails on a later item, the engine retries an
    older step through reset() (which waits for our copies first), and the
    tensors copied are overwritten by that step, or restore() raises."""

    def __init__(self, ckpt: "Checkpointer", state: Dict[str, Any]) -> None:
        self._ckpt, self._state = ckpt, state
        self._lock = threading.Lock()
        self._callers = {}  # device -> the caller's current stream
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                self._callers[torch.device("cuda", i)] = torch.cuda.current_stream(i)
        self._streams: Dict[torch.device, Any] = {}
        self._reset()

    def _reset(self) -> None:
        self.step: Optional[int] = None
        self._ready: set = set()
        self._plan: Optional[Dict[str, List[Tuple[torch.Tensor, torch.Tensor]]]] = None
        # _pair_key -> the live tensor copied into. Holding it keeps its
        # memory from being reused by a tensor of restore()'s own check (a
        # fresh state_dict() tensor at the same address is not the same pair).
        self.done: Dict[Tuple[int, int, int], torch.Tensor] = {}

    def reset(self) -> None:
        """Before the arena is (re)written: waits for the copies from it."""
        with self._lock:
            self.synchronize()
            self._reset()

    def synchronize(self) -> None:
        for stream in self._streams.values():
            stream.synchronize()

    def on_item(self, step: int, index: int, layout: Tuple[Tuple[str, int, int], ...]) -> None:
        with self._lock:
            if step != self.step:
                self._reset()
                self.step = step
            name = layout[index][0]
            self._ready.add(name)
            if self._plan is None:
                if TREE_ITEM not in self._ready:
                    return
                self._plan = self._make_plan(step, layout)
                names = list(self._ready)
            else:
                names = [name]
            for n in names:
                pairs = self._plan.pop(n, None)
                if pairs:
                    self._copy(pairs)

    def _make_plan(self, step: int, layout) -> Dict[str, List[Tuple[torch.Tensor, torch.Tensor]]]:
        """Item name -> the (live, restored) pairs it fills; {} when the state
        does not fit (restore() then raises) or the step is not in the arena."""
        arena = self._ckpt._stager.arena
        base, size = arena.buffer.data_ptr(), arena.nbytes
        items, by_address = {}, {}
        for name, address, nbytes in layout:
            if nbytes and not base <= address <= base + size - nbytes:
                return {}  # the engine allocated instead: not our memory
            items[name] = arena.array[address - base:address - base + nbytes]
            by_address[address] = name
        try:
            restored = _Reading(step, items)
            entries = self._ckpt._read_tree(restored)
            copies: List[Tuple[torch.Tensor, torch.Tensor]] = []
            for key, value in self._state.items():
                if key not in entries:
                    return {}
                self._ckpt._check(key, value, entries[key], restored, True, copies, dry=True)
        except Exception:  # noqa: BLE001 - restore()'s own check raises it, with context
            return {}
        plan: Dict[str, List[Tuple[torch.Tensor, torch.Tensor]]] = {}
        for dst, src in copies:
            name = by_address.get(src.data_ptr())
            if name is not None and src.numel():
                plan.setdefault(name, []).append((dst, src))
        return plan

    def _copy(self, pairs: List[Tuple[torch.Tensor, torch.Tensor]]) -> None:
        pinned = self._ckpt._stager.arena.pinned
        with torch.no_grad():
            for dst, src in pairs:
                if dst.is_cuda:
                    with torch.cuda.stream(self._stream(dst.device)):
                        _bits(dst).copy_(_bits(src), non_blocking=pinned)
                else:
                    _bits(dst).copy_(_bits(src))
                self.done[_pair_key(dst, src)] = dst

    def _stream(self, device: torch.device) -> Any:
        stream = self._streams.get(device)
        if stream is None:
            stream = torch.cuda.Stream(device)
            caller = self._callers.get(device)
            if caller is not None:
                stream.wait_stream(caller)
            self._streams[device] = stream
        return stream


class _Reading(NamedTuple):
    """What _read_tree and _check use of a strata.Restored."""
    step: int
    items: Dict[str, numpy.ndarray]


class Checkpointer:
    """A strata.Checkpointer that saves and restores PyTorch state trees.

    Takes the keyword arguments of strata.Checkpointer, with the same
    defaults (save_interval_steps, max_to_keep, async_save,
    exit_after_ondemand, agent_job, ...), and `overlap` (default False): the
    default of save()'s `overlap`.

    Tensors are staged in a host arena of the state's size, page-locked when
    CUDA is available (`staging_bytes`, `staging_pinned`), allocated at the
    first save and reused by every later save and restore; the engine writes
    from it directly, so the engine's own staging memory stays unused.
    """

    def __init__(self, directory: str, *, overlap: bool = False, **options: Any) -> None:
        self._ckpt = strata.Checkpointer(directory, **options)
        self._overlap = overlap
        self._stager = _Stager()
        self._pending: Optional[_Pending] = None
        self._hooks: Dict[int, Any] = {}  # id(optimizer) -> its step pre-hook's handle
        self._restore_to_arena = torch.cuda.is_available()
        self._pipeline: Optional[_Pipeline] = None  # of the restore under way
        self._pipelined = 0

    def should_save(self, step: int) -> bool:
        return self._ckpt.should_save(step)

    def save(self, step: int, state: Dict[str, Any], *,
             overlap: Optional[bool] = None) -> strata.SaveResult:
        """Saves every entry of `state` as `step`. Stateful entries are saved
        as their state_dict(); see the module documentation.

        Every tensor is copied once into the staging arena (a CUDA tensor
        with one device->host copy on Strata's stream for its device, after
        the work already enqueued on the device's current stream). Blocking
        (the default): returns when every copy is done; the tensors may then
        change at once. `overlap=True`: returns once the copies of the CUDA
        tensors that only an optimizer of `state` changes (its parameters and
        state) are enqueued; forward and backward passes run alongside them,
        and the next step() of those optimizers (a pre-step hook installed
        here) makes the devices' streams wait for the copies first; call
        wait_staged() before changing such a tensor any other way. A tensor
        changed in place before that (its _version moved) fails this save
        (the error is raised by the next save() or wait()) rather than
        letting a torn copy be committed. Every other tensor is copied before
        save() returns. The next save(), restore(), wait() and close() wait
        for the copies anyway."""
        overlap = self._overlap if overlap is None else overlap
        self.wait_staged()
        # The arena is lent to the engine's background write of the previous
        # save until it finishes; its failure stays for the engine's save.
        self._ckpt.await_idle()
        encoder = _Encoder()
        optimizers = [v for v in state.values() if isinstance(v, torch.optim.Optimizer)]
        defer = overlap and torch.cuda.is_available() and bool(optimizers)
        params = {(p.to_local() if _is_dtensor(p) else p).data_ptr()
                  for o in optimizers for g in o.param_groups for p in g["params"]
                  if p.is_cuda} if defer else set()
        tree = {}
        for key, value in state.items():
            if not isinstance(key, str):
                raise TypeError(f"state keys must be str, not {type(key).__name__} ({key!r})")
            encoder.deferrable = None
            if defer and isinstance(value, torch.optim.Optimizer):
                encoder.deferrable = lambda t: True  # only its step() changes its state
            elif defer and isinstance(value, torch.nn.Module):
                encoder.deferrable = lambda t: t.data_ptr() in params
            if isinstance(value, torch.Generator):
                tree[key] = {"$generator": encoder.encode(value.get_state(), key)}
            elif _is_stateful(value):
                tree[key] = {"$stateful": encoder.encode(value.state_dict(), key)}
            else:
                tree[key] = {"$value": encoder.encode(value, key)}
        blob = json.dumps({"format": _FORMAT, "entries": tree}).encode()
        items, pending = self._stager.stage(encoder.items, defer)
        items[TREE_ITEM] = (blob, "bytes")
        ready = None
        if pending.events:
            for o in optimizers:
                self._hook(o)
            self._pending = pending
            ready = pending.ready
        return self._ckpt.save(step, items, borrowed=True, ready=ready)

    def _hook(self, optimizer: torch.optim.Optimizer) -> None:
        if id(optimizer) in self._hooks:
            return
        me = weakref.ref(self)  # the optimizer must not keep the checkpointer alive

        def hook(*_: Any) -> None:
            ckpt = me()
            if ckpt is not None:
                ckpt.wait_staged()

        handle = optimizer.register_step_pre_hook(hook)
        self._hooks[id(optimizer)] = handle

    def wait_staged(self) -> None:
        """Orders the devices' current streams after the copies of the last
        overlapped save (a wait on the device, not on the host), so any work
        enqueued afterwards may change the saved tensors. The pre-step hook
        calls it; a loop that changes saved tensors outside optimizer.step()
        calls it first. Cheap when there is nothing to wait for."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.order()

    @property
    def staging_bytes(self) -> int:
        """Bytes of host memory staging saves (page-locked if staging_pinned):
        the size of the largest state saved or step restored so far."""
        return self._stager.arena.nbytes

    @property
    def staging_pinned(self) -> bool:
        return self._stager.arena.pinned

    def restore(self, state: Dict[str, Any], *, step: Optional[int] = None) -> Optional[int]:
        """Restores the newest step that verifies (or `step`; with an agent
        job, the step the agent chose) into `state`; returns the step, or
        None when there is nothing to restore (strata.DataLossError when
        there are steps and none verifies). Entries of the checkpoint that
        `state` does not name are ignored; a name in `state` the checkpoint
        lacks is an error. Nothing is loaded unless every entry fits."""
        self.wait_staged()
        to_arena = self._restore_to_arena
        pipeline = self._pipeline = _Pipeline(self, state) if to_arena else None
        try:
            restored = self._ckpt.restore(step=step,
                                          allocate=self._allocate if to_arena else None,
                                          on_item=pipeline.on_item if pipeline else None)
        finally:
            self._pipeline = None
            if pipeline:
                pipeline.synchronize()  # the arena is ours again (the next save reuses it)
        if restored is None:
            return None
        entries = self._read_tree(restored)
        for key in state:
            if key not in entries:
                raise strata.InvalidArgumentError(
                    f"step {restored.step} has no entry '{key}' (it has: "
                    f"{', '.join(sorted(entries))})")
        # Decode and check everything before loading anything: a mismatch in
        # one entry leaves every object as it was.
        copies: List[Tuple[torch.Tensor, torch.Tensor]] = []
        decoded = {key: self._check(key, value, entries[key], restored, to_arena, copies)
                   for key, value in state.items()}
        done = pipeline.done if pipeline and pipeline.step == restored.step else {}
        self._pipelined = len(done)  # for tests: the copies made while reading
        _copy_into(copies, pinned=to_arena and self._stager.arena.pinned, done=done.keys())
        for key, (kind, value) in decoded.items():
            state[key] = self._load(kind, state[key], value)
        return restored.step

    def _allocate(self, nbytes: int) -> numpy.ndarray:
        if self._pipeline is not None:
            self._pipeline.reset()
        self._stager.arena.ensure(nbytes)
        return self._stager.arena.array

    def _read_tree(self, restored: strata.Restored) -> Dict[str, Any]:
        blob = restored.items.get(TREE_ITEM)
        if blob is None:
            raise strata.InvalidArgumentError(
                f"step {restored.step} in {self._ckpt.directory} was not saved by strata.torch "
                f"(no {TREE_ITEM} item); use strata.Checkpointer.restore() for it")
        tree = json.loads(blob.tobytes())
        if tree.get("format") != _FORMAT:
            raise strata.InvalidArgumentError(
                f"step {restored.step}: state tree format {tree.get('format')} is not "
                f"{_FORMAT}")
        return tree["entries"]

    @staticmethod
    def _check(key: str, target: Any, node: Dict[str, Any], restored: Any,
               in_arena: bool, copies: List[Tuple[torch.Tensor, torch.Tensor]],
               dry: bool = False):
        """Decodes one entry and checks that it fits `target`; returns
        (kind, value). A stateful entry's tensors that have a live tensor of
        the same shape and dtype in the target's state_dict() are that
        tensor, with (live, restored) appended to `copies`; the caller copies
        once every entry fits. `dry`: only the check and `copies` matter (the
        items may not be verified yet): nothing is cloned."""
        step = restored.step
        kind, payload = next(iter(node.items()))
        # A module copies what it loads into its parameters; other objects may
        # keep the tensors (torch 2's Optimizer.load_state_dict does), which
        # would hold the whole restored step in memory if they were views.
        # Restored into the arena, which the next save reuses, nothing may
        # stay a view of it.
        copy = not dry and (in_arena or
                            (kind == "$stateful" and not isinstance(target, torch.nn.Module)))
        if kind == "$stateful" and _is_stateful(target):
            value = _Decoder(restored.items, step, False).decode(payload)
            live = _target_state(target)
            value = _fit(value, live, key, step, check=True)
            return kind, _place(value, live, copy, copies)
        value = _Decoder(restored.items, step, copy).decode(payload)
        if kind == "$generator" and not isinstance(target, torch.Generator):
            raise strata.InvalidArgumentError(
                f"step {step}: '{key}' was saved from a torch.Generator")
        if kind == "$stateful":
            if not _is_stateful(target):
                raise strata.InvalidArgumentError(
                    f"step {step}: '{key}' was saved from an object with state_dict(); "
                    f"restore it into one, not into {type(target).__name__}")
            return kind, _fit(value, _target_state(target), key, step, check=True)
        return kind, _fit(value, target, key, step, check=False)

    @staticmethod
    def _load(kind: str, target: Any, value: Any) -> Any:
        if kind == "$generator":
            target.set_state(value)
            return target
        if kind == "$stateful":
            target.load_state_dict(value)
            return target
        return value

    def wait(self) -> None:
        self.wait_staged()
        self._ckpt.wait()

    def request_on_demand(self) -> None:
        self._ckpt.request_on_demand()

    @property
    def status(self) -> strata.CheckpointerStatus:
        return self._ckpt.status

    @property
    def directory(self) -> str:
        return self._ckpt.directory

    def close(self) -> None:
        self.wait_staged()
        self._ckpt.close()
        for handle in self._hooks.values():
            handle.remove()
        self._hooks.clear()
        self._stager.arena.release()

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
