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
...) are saved by name with their dtype and shape. A save hands the whole
state to libstrata's stager in one call (python/src/stager.cc): every tensor
is copied once, straight into the step's files on the RAM disk (mapped and,
with CUDA, page-locked once: a GPU tensor takes one device->host copy on a
stream of Strata's own), then checksummed in place and committed; nothing
is pickled and nothing is copied twice. save() returns once the copies are
done, so training may change the tensors at once; with overlap=True it
returns once they are enqueued and the optimizers' next step() waits for
them (see save()). A restore reads and verifies the step and copies each
tensor into its live counterpart as soon as it is verified, in C++. A
DTensor is saved as this process's local shard with its layout, and
restored into a DTensor laid out the same way. Everything else is kept as a
small JSON tree that restore decodes without running any code.
"""

import json
import random
import threading
import warnings
import weakref
from typing import Any, Dict, List, Optional, Set, Tuple

import numpy
import torch

import strata
from strata._arena import release_staged, stage_state_dict
from strata._tree import (TREE_ITEM, _FORMAT, _TORCH_DTYPES, _Decoder, _Encoder,  # noqa: F401
                          _Unplanned, _bits, _fit, _is_dtensor, _is_stateful, _materialize,
                          _place, _target_state, gc_paused, tree_item)

__all__ = ["Checkpointer", "RNGState", "TREE_ITEM", "stage_state_dict", "release_staged"]

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



def _copy_into(copies: List[Tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Copies restored host tensors into the live tensors the stager did not
    copy into (non-contiguous ones): CUDA ones on the devices' current
    streams, then waits for those."""
    devices = set()
    with torch.no_grad():
        for dst, src in copies:
            if dst.is_cuda:
                devices.add(dst.device)
            if src.numel():
                _bits(dst).copy_(_bits(src))
    for device in devices:
        torch.cuda.current_stream(device).synchronize()



class _Pending:
    """The copies an overlapped save may still make after save() returned:
    of the deferrable tensors `encoder` saw, with the version each had.
    Until order() has made the devices' current streams wait for the copies,
    an in-place change of one of those tensors may race with its copy: the
    gate (called by the committing thread once every copy is checksummed)
    then fails the save rather than let a torn copy be committed."""

    def __init__(self, ckpt: strata.Checkpointer, encoder: _Encoder) -> None:
        self._ckpt = ckpt
        self._tensors = encoder.deferred
        self._versions = [t._version for t in self._tensors]
        self._devices = sorted(encoder.devices)
        self._ordered = False
        self._error: Optional[str] = None
        self._lock = threading.Lock()

    def _changed(self, when: str) -> None:
        changed = [i for i, (t, v) in enumerate(zip(self._tensors, self._versions))
                   if t._version != v]
        if changed and self._error is None:
            self._error = (f"{len(changed)} saved tensor(s) changed in place after save() "
                           f"returned and before {when} (call wait_staged() before changing "
                           "saved tensors outside optimizer.step())")

    def order(self) -> None:
        """Orders every later kernel of the devices' current streams after the
        copies (no host wait). Idempotent."""
        with self._lock:
            if self._ordered:
                return
            self._changed("their staging copy was ordered")
        for device in self._devices:
            self._ckpt.order_after_staging(torch.cuda.current_stream(device).cuda_stream, device)
        with self._lock:
            self._ordered = True

    def gate(self) -> None:
        """The save's gate: raises (the save then fails) if a copied tensor may
        have changed under its copy."""
        with self._lock:
            if not self._ordered:
                self._changed("their staging copy was done")  # a change that raced is visible now
            if self._error:
                raise RuntimeError(self._error)


class _Planner:
    """Where each item of the step being restored goes, for the stager's
    planned restore (CudaStager::RestorePlanned): called as soon as the state
    tree is read, it checks the state against the tree without loading
    anything (tensors are placeholders) and returns the live tensor each
    item is copied into. Nothing is planned unless the whole state fits
    (restore() then raises its own error), so a mismatch loads nothing."""

    def __init__(self, ckpt: "Checkpointer", state: Dict[str, Any]) -> None:
        self._ckpt, self._state = ckpt, state
        self.step: Optional[int] = None
        self.done: Set[Tuple[str, int]] = set()  # (item, live address) copied for `step`
        self._keep: List[torch.Tensor] = []      # the live tensors: their addresses stay theirs
        # For restore() to finish without decoding again: each entry as
        # planned, what placeholders stand for, the pairs left to copy.
        self.planned: Optional[Dict[str, Tuple[str, Any]]] = None
        self.leftover: List[Tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, step: int, key: memoryview) -> List[Tuple[str, int, int, int, int]]:
        self.step, self.done, self._keep, self.planned = step, set(), [], None
        reading = _Reading(step, None)
        try:
            entries = self._ckpt._entries(step, bytes(key))
            pairs: List[Tuple[torch.Tensor, Any]] = []
            planned = {}
            for key_, value in self._state.items():
                if key_ not in entries:
                    return []
                planned[key_] = self._ckpt._check(key_, value, entries[key_], reading, False,
                                                  pairs, dry=True)
        except Exception:  # noqa: BLE001 - restore()'s own check raises it, with context
            return []
        self.planned = planned
        return self._destinations(pairs)

    def _destinations(self, pairs) -> List[Tuple[str, int, int, int, int]]:
        streams: Dict[int, int] = {}
        out, used = [], set()
        self.leftover = []
        for dst, src in pairs:
            name = src.name
            if name in used or not src.numel() or not dst.is_contiguous():
                if src.numel():
                    self.leftover.append((dst, src))
                continue  # restore() copies these itself
            if dst.is_cuda:
                device = dst.get_device()
                if device not in streams:
                    streams[device] = torch.cuda.current_stream(device).cuda_stream
                stream = streams[device]
            elif dst.is_cpu:
                device, stream = -1, 0
            else:
                continue
            used.add(name)
            out.append((name, dst.data_ptr(), dst.nbytes, device, stream))
            self.done.add((name, dst.data_ptr()))
            self._keep.append(dst)
        return out


class _Reading:
    """What _check uses of a strata.Restored (items None: being planned)."""
    __slots__ = ("step", "items")

    def __init__(self, step: int, items: Optional[Dict[str, numpy.ndarray]]) -> None:
        self.step, self.items = step, items


class Checkpointer:
    """A strata.Checkpointer that saves and restores PyTorch state trees.

    Takes the keyword arguments of strata.Checkpointer, with the same
    defaults (save_interval_steps, max_to_keep, async_save,
    exit_after_ondemand, agent_job, ...), and `overlap` (default False): the
    default of save()'s `overlap`.

    Saves copy every tensor straight into the step's files (see the module
    documentation); the host memory this takes -- the step files kept
    mapped, page-locked with CUDA -- is `staging_bytes` / `staging_pinned`.
    It is set up ahead of the first save, in the background: by restore()
    once the state is restored, at the first optimizer step after a fresh
    start, or by reserve().
    """

    def __init__(self, directory: str, *, overlap: bool = False, **options: Any) -> None:
        self._ckpt = strata.Checkpointer(directory, **options)
        self._overlap = overlap
        self._pending: Optional[_Pending] = None
        self._hooks: Dict[int, Any] = {}     # id(optimizer) -> its step pre-hook's handle
        self._reserve_hooks: List[Any] = []  # post-step hooks that reserve after a fresh start
        self._specs: Optional[list] = None   # what _batch was built for
        self._batch: Optional[strata.Batch] = None
        self._keep: List[Any] = []           # what the last save's copies read
        self._pipelined = 0                  # for tests: the items the stager copied in place

    def should_save(self, step: int) -> bool:
        return self._ckpt.should_save(step)

    def _encode(self, state: Dict[str, Any], optimizers: List[Any]) -> _Encoder:
        """The items and tree of `state`; with `optimizers` (an overlapped
        save), the CUDA tensors only they change are deferrable."""
        encoder = _Encoder()
        params = {(p.to_local() if _is_dtensor(p) else p).data_ptr()
                  for o in optimizers for g in o.param_groups for p in g["params"]
                  if p.is_cuda} if optimizers else set()
        tree = {}
        for key, value in state.items():
            if not isinstance(key, str):
                raise TypeError(f"state keys must be str, not {type(key).__name__} ({key!r})")
            encoder.deferrable = None
            if optimizers and isinstance(value, torch.optim.Optimizer):
                encoder.deferrable = lambda t: True  # only its step() changes its state
            elif optimizers and isinstance(value, torch.nn.Module):
                encoder.deferrable = lambda t: t.data_ptr() in params
            if isinstance(value, torch.Generator):
                tree[key] = {"$generator": encoder.encode(value.get_state(), key)}
            elif _is_stateful(value):
                tree[key] = {"$stateful": encoder.encode(value.state_dict(), key)}
            else:
                tree[key] = {"$value": encoder.encode(value, key)}
        encoder.host(tree_item({"format": _FORMAT, "entries": tree}), TREE_ITEM)
        return encoder

    def _batch_for(self, specs: list) -> strata.Batch:
        """The batch of these items: the last one while they are the same."""
        if specs != self._specs:
            self._batch, self._specs = strata.Batch(specs), specs
        return self._batch

    def save(self, step: int, state: Dict[str, Any], *,
             overlap: Optional[bool] = None) -> strata.SaveResult:
        """Saves every entry of `state` as `step`. Stateful entries are saved
        as their state_dict(); see the module documentation.

        Every tensor is copied once, into the step's files (a CUDA tensor with
        one device->host copy on Strata's stream for its device, after the
        work already enqueued on the device's current stream). Blocking (the
        default): returns when every copy is done; the tensors may then
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
        optimizers = [v for v in state.values() if isinstance(v, torch.optim.Optimizer)]
        defer = overlap and torch.cuda.is_available() and bool(optimizers)
        with gc_paused():
            encoder = self._encode(state, optimizers if defer else [])
            batch = self._batch_for(encoder.specs)
        pending = _Pending(self._ckpt, encoder) if encoder.deferred else None
        streams = {d: torch.cuda.current_stream(d).cuda_stream for d in encoder.devices}
        result = self._ckpt.save_batch(step, batch, encoder.pointers,
                                       streams=streams, overlap=pending is not None,
                                       gate=pending.gate if pending else None)
        self._keep = encoder.keep  # the last save's copies are done: its tensors may go
        if pending is not None:
            for o in optimizers:
                self._hook(o)
            self._pending = pending
        return result

    def reserve(self, state: Dict[str, Any]) -> None:
        """Prepares, in the background, the host memory a save of `state` will
        take (the step files, mapped and page-locked), so that the first save
        sets nothing up on the training thread. restore() calls it once the
        state is restored, and after a fresh start the first optimizer step
        does; call it yourself when the state's size changes."""
        with gc_paused():
            batch = self._batch_for(self._encode(state, []).specs)
        self._ckpt.reserve_batch(batch)

    def _reserve_after_first_step(self, state: Dict[str, Any]) -> None:
        """After a fresh start the optimizers have no state until they step:
        the first step of one reserves for the whole state."""
        me = weakref.ref(self)

        def hook(*_: Any) -> None:
            ckpt = me()
            if ckpt is None:
                return
            for handle in ckpt._reserve_hooks:
                handle.remove()
            ckpt._reserve_hooks = []
            ckpt.reserve(state)

        self._reserve_hooks = [v.register_step_post_hook(hook) for v in state.values()
                               if isinstance(v, torch.optim.Optimizer)]
        if not self._reserve_hooks:
            self.reserve(state)

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
        """Bytes of host memory held for saves: the step files kept mapped (one
        prepared for the next save, and the committed ones retention will
        recycle). Page-locked if staging_pinned."""
        return self._ckpt.staging["bytes"]

    @property
    def staging_pinned(self) -> bool:
        return self._ckpt.staging["pinned"]

    def restore(self, state: Dict[str, Any], *, step: Optional[int] = None) -> Optional[int]:
        """Restores the newest step that verifies (or `step`; with an agent
        job, the step the agent chose) into `state`; returns the step, or
        None when there is nothing to restore (strata.DataLossError when
        there are steps and none verifies). Entries of the checkpoint that
        `state` does not name are ignored; a name in `state` the checkpoint
        lacks is an error. Nothing is loaded unless every entry fits."""
        self.wait_staged()
        planner = _Planner(self, state)
        with gc_paused():  # the planner runs on a reading thread meanwhile
            restored = self._ckpt.restore_planned(TREE_ITEM, planner, step=step)
            if restored is None:
                self._reserve_after_first_step(state)
                return None
            decoded = self._finish_planned(planner, restored, state)
            if decoded is None:
                decoded = self._decode_again(planner, restored, state)
        for key, (kind, value) in decoded.items():
            state[key] = self._load(kind, state[key], value)
        if not self._ckpt.staging["bytes"]:  # a fresh process: nothing set up to save into
            self.reserve(state)
        return restored.step

    def _finish_planned(self, planner: "_Planner", restored: strata.Restored,
                        state: Dict[str, Any]) -> Optional[Dict[str, Tuple[str, Any]]]:
        """The entries as the planner checked them, the tensors the stager did
        not copy into live ones read from the restored items; None when the
        plan does not cover the step restored."""
        if planner.planned is None or planner.step != restored.step:
            return None
        try:
            decoded = {}
            for key, (kind, value) in planner.planned.items():
                copy = restored.lent or (kind == "$stateful" and
                                         not isinstance(state[key], torch.nn.Module))
                decoded[key] = (kind, _materialize(value, restored.items, restored.step, copy))
            leftover = [(dst, _materialize(src, restored.items, restored.step, False))
                        for dst, src in planner.leftover]
        except _Unplanned:
            return None
        _copy_into(leftover)
        self._pipelined = len(planner.done)
        return decoded

    def _decode_again(self, planner: "_Planner", restored: strata.Restored,
                      state: Dict[str, Any]) -> Dict[str, Tuple[str, Any]]:
        """Decodes and checks every entry from the restored items (raising
        what does not fit), then copies what the stager did not."""
        entries = self._read_tree(restored)
        for key in state:
            if key not in entries:
                raise strata.InvalidArgumentError(
                    f"step {restored.step} has no entry '{key}' (it has: "
                    f"{', '.join(sorted(entries))})")
        # Decode and check everything before loading anything: a mismatch in
        # one entry leaves every object as it was.
        copies: List[Tuple[torch.Tensor, torch.Tensor]] = []
        reading = _Reading(restored.step, restored.items)
        decoded = {key: self._check(key, value, entries[key], reading, restored.lent, copies)
                   for key, value in state.items()}
        done = planner.done if planner.step == restored.step else set()
        items = {a.__array_interface__["data"][0]: name for name, a in restored.items.items()
                 if a.size}
        rest = [(d, s) for d, s in copies if (items.get(s.data_ptr()), d.data_ptr()) not in done]
        self._pipelined = len(copies) - len(rest)
        _copy_into(rest)
        return decoded

    def _entries(self, step: int, blob: bytes) -> Dict[str, Any]:
        tree = json.loads(blob)
        if tree.get("format") != _FORMAT:
            raise strata.InvalidArgumentError(
                f"step {step}: state tree format {tree.get('format')} is not {_FORMAT}")
        return tree["entries"]

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
               lent: bool, copies: List[Tuple[torch.Tensor, torch.Tensor]],
               dry: bool = False):
        """Decodes one entry and checks that it fits `target`; returns
        (kind, value). A stateful entry's tensors that have a live tensor of
        the same shape and dtype in the target's state_dict() are that
        tensor, with (live, restored) appended to `copies`; the caller copies
        once every entry fits. `dry`: only the check and `copies` matter: the
        items are not read yet (`restored.items` is None) and tensors are
        placeholders (_Placeholder) naming their items."""
        step = restored.step
        kind, payload = next(iter(node.items()))
        # A module copies what it loads into its parameters; other objects may
        # keep the tensors (torch 2's Optimizer.load_state_dict does), which
        # would hold the whole restored step in memory if they were views.
        # Restored where a later save writes (`lent`: a slot's step files),
        # nothing may stay a view of it.
        copy = not dry and (lent or
                            (kind == "$stateful" and not isinstance(target, torch.nn.Module)))
        value = _Decoder(restored.items, step, copy and kind != "$stateful").decode(payload)
        if kind == "$stateful" and _is_stateful(target):
            live = _target_state(target)
            value = _fit(value, live, key, step, check=True)
            return kind, _place(value, live, copy, copies)
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
        for handle in list(self._hooks.values()) + self._reserve_hooks:
            handle.remove()
        self._hooks.clear()
        self._reserve_hooks = []
        self._keep = []

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
