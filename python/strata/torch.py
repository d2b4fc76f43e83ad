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
...) are saved by name with their dtype and shape, straight from their
memory (no pickling, no copy on the Python side; an async save copies them
into Strata's staging memory before save() returns, so training may change
them at once). A DTensor is saved as this process's local shard with its
layout, and restored into a DTensor laid out the same way. Everything else
is kept as a small JSON tree that restore decodes without running any code:
nothing is unpickled.
"""

import base64
import json
import random
import sys
import warnings
from typing import Any, Dict, List, Optional

import numpy
import torch

import strata

__all__ = ["Checkpointer", "RNGState", "TREE_ITEM"]

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


class _Encoder:
    """Flattens a state tree into Strata items (tensors and arrays, by
    reference) and a JSON tree (everything else) that names them."""

    def __init__(self) -> None:
        self.items: Dict[str, Any] = {}

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
        t = t.detach().resolve_conj().resolve_neg()  # lazy conjugate/negative views
        size = t.element_size()
        bits = (t.view(_BITS[size]) if size in _BITS else t).cpu().contiguous()
        dtype = str(t.dtype).removeprefix("torch.")
        name = self._item_name(path)
        if dtype in _STRATA_DTYPES:
            self.items[name] = (bits.numpy(), dtype)
        else:
            self.items[name] = (bits.reshape(-1).view(torch.uint8).numpy(), "bytes")
        return {"$tensor": name, "dtype": dtype, "shape": list(t.shape)}

    def array(self, a: numpy.ndarray, path: str, scalar: bool = False) -> Dict[str, Any]:
        if a.dtype.hasobject or a.dtype.fields is not None:
            raise TypeError(f"cannot save {path}: NumPy arrays of Python objects or of "
                            "structured dtypes are not supported")
        shape = list(a.shape)  # ascontiguousarray makes 0-d arrays 1-d
        flat = numpy.ascontiguousarray(a).reshape(-1)
        name = self._item_name(path)
        self.items[name] = (flat.view(numpy.uint8), "bytes")
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


class Checkpointer:
    """A strata.Checkpointer that saves and restores PyTorch state trees.

    Takes the keyword arguments of strata.Checkpointer, with the same
    defaults (save_interval_steps, max_to_keep, async_save,
    exit_after_ondemand, agent_job, ...).
    """

    def __init__(self, directory: str, **options: Any) -> None:
        self._ckpt = strata.Checkpointer(directory, **options)

    def should_save(self, step: int) -> bool:
        return self._ckpt.should_save(step)

    def save(self, step: int, state: Dict[str, Any]) -> strata.SaveResult:
        """Saves every entry of `state` as `step`. Stateful entries are saved
        as their state_dict(); see the module documentation."""
        encoder = _Encoder()
        tree = {}
        for key, value in state.items():
            if not isinstance(key, str):
                raise TypeError(f"state keys must be str, not {type(key).__name__} ({key!r})")
            if isinstance(value, torch.Generator):
                tree[key] = {"$generator": encoder.encode(value.get_state(), key)}
            elif _is_stateful(value):
                tree[key] = {"$stateful": encoder.encode(value.state_dict(), key)}
            else:
                tree[key] = {"$value": encoder.encode(value, key)}
        blob = json.dumps({"format": _FORMAT, "entries": tree}).encode()
        encoder.items[TREE_ITEM] = (blob, "bytes")
        return self._ckpt.save(step, encoder.items)

    def restore(self, state: Dict[str, Any], *, step: Optional[int] = None) -> Optional[int]:
        """Restores the newest step that verifies (or `step`; with an agent
        job, the step the agent chose) into `state`; returns the step, or
        None when there is nothing to restore (strata.DataLossError when
        there are steps and none verifies). Entries of the checkpoint that
        `state` does not name are ignored; a name in `state` the checkpoint
        lacks is an error. Nothing is loaded unless every entry fits."""
        restored = self._ckpt.restore(step=step)
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
        decoded = {key: self._check(key, value, entries[key], restored)
                   for key, value in state.items()}
        for key, (kind, value) in decoded.items():
            state[key] = self._load(kind, state[key], value)
        return restored.step

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
    def _check(key: str, target: Any, node: Dict[str, Any], restored: strata.Restored):
        """Decodes one entry and checks that it fits `target`; returns
        (kind, value)."""
        step = restored.step
        kind, payload = next(iter(node.items()))
        # A module copies what it loads into its parameters; other objects may
        # keep the tensors (torch 2's Optimizer.load_state_dict does), which
        # would hold the whole restored step in memory if they were views.
        copy = kind == "$stateful" and not isinstance(target, torch.nn.Module)
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
        self._ckpt.close()

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
