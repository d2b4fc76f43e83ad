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

Tensors are saved by name with their dtype and shape, straight from their
memory (no pickling, no copy on the Python side; an async save copies them
into Strata's staging memory before save() returns, so training may change
them at once). Everything else is kept as a small JSON tree that restore
decodes without running any code: nothing is unpickled.
"""

import base64
import json
import random
from typing import Any, Dict, Optional

import numpy
import torch

import strata

__all__ = ["Checkpointer", "RNGState", "TREE_ITEM"]

# The item that holds the JSON tree of a checkpoint saved by this module.
TREE_ITEM = "__strata_torch_tree__"
_FORMAT = 1

# Tensor dtypes saved through tensor.numpy() under the same name in Strata.
# bfloat16 goes as int16 bit patterns named "bfloat16"; complex as bytes.
_NUMPY_DTYPES = {torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
                 torch.float16, torch.float32, torch.float64}
# Every tensor dtype a checkpoint may name, by its name without "torch.".
_TORCH_DTYPE = {str(dt).removeprefix("torch."): dt
                for dt in _NUMPY_DTYPES | {torch.bfloat16, torch.complex64, torch.complex128}}


class RNGState:
    """The process's global random generators as one stateful entry: Python's
    `random`, NumPy's global generator and torch's CPU (and CUDA) generators.
    """

    def state_dict(self) -> Dict[str, Any]:
        out = {"python": random.getstate(), "numpy": numpy.random.get_state(),
               "torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            out["cuda"] = torch.cuda.get_rng_state_all()
        return out

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        random.setstate(state["python"])
        numpy.random.set_state(state["numpy"])
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])


def _is_stateful(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None))


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
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.resolve_conj().resolve_neg().contiguous()  # lazy conjugate/negative views
        name = self._item_name(path)
        dtype = str(t.dtype).removeprefix("torch.")
        if t.dtype == torch.bfloat16:
            self.items[name] = (t.view(torch.int16).numpy(), "bfloat16")
        elif t.dtype in _NUMPY_DTYPES:
            self.items[name] = t.numpy()
        elif dtype in _TORCH_DTYPE:  # complex: its bytes
            self.items[name] = (t.reshape(-1).view(torch.uint8).numpy(), "bytes")
        else:
            raise TypeError(f"cannot save {path}: tensor dtype {t.dtype} is not supported")
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


def _decode(node: Any, items: Dict[str, Any], step: int) -> Any:
    if not isinstance(node, dict):
        return node
    if "$tensor" in node:
        return _tensor_from(node, items, step)
    if "$array" in node:
        raw = items[node["$array"]]
        a = raw.view(numpy.dtype(node["dtype"])).reshape(node["shape"])
        return a[()] if node.get("scalar") else a
    if "$bytes" in node:
        return base64.b64decode(node["$bytes"])
    if "$dict" in node:
        return {_decode(k, items, step): _decode(v, items, step) for k, v in node["$dict"]}
    if "$list" in node:
        return [_decode(v, items, step) for v in node["$list"]]
    if "$tuple" in node:
        return tuple(_decode(v, items, step) for v in node["$tuple"])
    if "$torch_dtype" in node:
        return _TORCH_DTYPE[node["$torch_dtype"]]
    raise strata.DataLossError(f"step {step}: unknown node in the state tree: {sorted(node)}")


def _tensor_from(node: Dict[str, Any], items: Dict[str, Any], step: int) -> torch.Tensor:
    name, dtype = node["$tensor"], _TORCH_DTYPE.get(node["dtype"])
    if name not in items or dtype is None:
        raise strata.DataLossError(f"step {step}: tensor item '{name}' ({node['dtype']}) is "
                                   "missing or has an unknown dtype")
    raw = items[name]
    if raw.dtype == numpy.uint16:  # bfloat16 bit patterns; torch has no uint16
        raw = raw.view(numpy.int16)
    t = torch.from_numpy(raw)  # shares the restored memory
    if t.dtype != dtype:  # bfloat16 bit patterns, complex bytes
        t = t.view(dtype)
    return t.reshape(node["shape"])


def _check_shapes(saved: Any, target: Any, path: str, step: int) -> None:
    """Raises InvalidArgumentError naming the first tensor whose shape or dtype
    differs between the checkpoint and the object it is restored into."""
    if isinstance(saved, torch.Tensor) and isinstance(target, torch.Tensor):
        if saved.shape != target.shape or saved.dtype != target.dtype:
            raise strata.InvalidArgumentError(
                f"step {step}: tensor '{path}' is {str(saved.dtype)[6:]}{list(saved.shape)} "
                f"in the checkpoint but {str(target.dtype)[6:]}{list(target.shape)} here")
    elif isinstance(saved, dict) and isinstance(target, dict):
        for k in (k for k in target if k in saved):  # in the target's order
            _check_shapes(saved[k], target[k], f"{path}.{k}", step)
    elif isinstance(saved, (list, tuple)) and isinstance(target, (list, tuple)):
        for i, (s, t) in enumerate(zip(saved, target)):
            _check_shapes(s, t, f"{path}.{i}", step)


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
        value = _decode(payload, restored.items, step)
        if kind == "$generator" and not isinstance(target, torch.Generator):
            raise strata.InvalidArgumentError(
                f"step {step}: '{key}' was saved from a torch.Generator")
        if kind == "$stateful":
            if not _is_stateful(target):
                raise strata.InvalidArgumentError(
                    f"step {step}: '{key}' was saved from an object with state_dict(); "
                    f"restore it into one, not into {type(target).__name__}")
            _check_shapes(value, target.state_dict(), key, step)
        return kind, value

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
