"""strata.torch's restore pipeline: the planner the stager calls as soon as
the state tree is read (it checks the state against the tree and names the
live tensor each item is copied into), then decoding and checking each
entry against its target (_tree.py's _fit/_place), copying what the stager
did not, and loading the entries into their objects."""

import json
from typing import Any, Dict, List, Optional, Set, Tuple

import numpy
import torch

import strata
from strata._tree import (TREE_ITEM, _FORMAT, _bits, _Decoder, _fit, _is_stateful, _materialize,
                          _place, _Placeholder, _placeholder_items, _plan, _target_state,
                          _Unplanned)


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


class _Planner:
    """Where each item of the step being restored goes, for the stager's
    planned restore (CudaStager::RestorePlanned): called as soon as the state
    tree is read, it checks the state against the tree without loading
    anything (tensors are placeholders) and returns the live tensor each
    item is copied into. Nothing is planned unless the whole state fits
    (restore() then raises its own error), so a mismatch loads nothing."""

    def __init__(self, state: Dict[str, Any]) -> None:
        self._state = state
        # The restoring thread's current stream of each device, asked here:
        # torch keeps them per thread, and the stager calls the planner on a
        # reading thread, whose own are the default streams. A copy into a
        # live tensor goes after the work queued on the stream the caller
        # trains on (a side stream as well as the default one).
        self._streams: Dict[int, int] = {
            d: torch.cuda.current_stream(d).cuda_stream
            for d in range(torch.cuda.device_count())} if torch.cuda.is_initialized() else {}
        self.step: Optional[int] = None
        self.done: Set[Tuple[str, int]] = set()  # (item, live address) copied for `step`
        self._keep: List[torch.Tensor] = []      # the live tensors: their addresses stay theirs
        # For restore() to finish without decoding again: each entry as
        # planned, what placeholders stand for, the pairs left to copy.
        self.planned: Optional[Dict[str, Tuple[str, Any]]] = None
        self.whole: Set[str] = set()  # planned entries with no placeholder left in them
        self.leftover: List[Tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, step: int, key: memoryview) -> List[Tuple[str, int, int, int, int]]:
        self.step, self.done, self._keep, self.planned = step, set(), [], None
        self.whole = set()
        try:
            entries = _entries(step, bytes(key))
            pairs: List[Tuple[torch.Tensor, Any]] = []
            planned = {}
            for key_, value in self._state.items():
                if key_ not in entries:
                    return []
                planned[key_] = self._plan_entry(key_, value, entries[key_], step, pairs)
        except Exception:  # noqa: BLE001 - restore()'s own check raises it, with context
            return []
        self.planned = planned
        return self._destinations(pairs)

    def _plan_entry(self, key: str, target: Any, node: Dict[str, Any], step: int,
                    pairs: List[Tuple[torch.Tensor, Any]]) -> Tuple[str, Any]:
        """check_entry(dry=True)'s (kind, value), a stateful entry's in one
        walk (_plan), noting in `whole` the entries _materialize can skip."""
        kind, payload = next(iter(node.items()))
        if kind != "$stateful" or not _is_stateful(target):
            return check_entry(key, target, node, _Reading(step, None), False, pairs, dry=True)
        generic = [0]
        value = _plan(payload, _target_state(target), key, _Decoder(None, step, False), pairs,
                      generic)
        if not generic[0]:
            self.whole.add(key)
        return kind, value

    def _destinations(self, pairs) -> List[Tuple[str, int, int, int, int]]:
        """The stager's destinations for `pairs` (live, _Placeholder or item
        name: _plan's): each contiguous live tensor on the CPU or a CUDA
        device, once per item. The others (not contiguous, a second tensor
        for an item, another device) go to `leftover`, which restore()
        copies itself; empty tensors go nowhere."""
        streams = self._streams
        out, used, keep = [], set(), self._keep
        self.leftover = []
        for dst, src in pairs:
            name = src if type(src) is str else src.name
            nbytes = dst.nbytes
            if not nbytes:
                continue
            if name not in used and dst.is_contiguous() and (dst.is_cpu or dst.is_cuda):
                device, stream = -1, 0
                if dst.is_cuda:
                    device = dst.get_device()
                    stream = streams[device]
                out.append((name, dst.data_ptr(), nbytes, device, stream))
                used.add(name)
                keep.append(dst)
                continue
            if type(src) is str:  # _plan's: the placeholder has the live tensor's dtype and shape
                src = _Placeholder(src, dst.dtype, dst.shape)
            self.leftover.append((dst, src))
        self.done = {(d[0], d[1]) for d in out}
        return out


class _Reading:
    """What _check uses of a strata.Restored (items None: being planned)."""
    __slots__ = ("step", "items")

    def __init__(self, step: int, items: Optional[Dict[str, numpy.ndarray]]) -> None:
        self.step, self.items = step, items


def finish_planned(planner: _Planner, restored: strata.Restored, state: Dict[str, Any]
                   ) -> Optional[Tuple[Dict[str, Tuple[str, Any]], int]]:
    """(the entries as the planner checked them, the items the stager copied
    in place), the tensors it did not copy into live ones copied from the
    restored items; None when the plan does not cover the step restored."""
    if planner.planned is None or planner.step != restored.step:
        return None
    try:
        decoded = {}
        for key, (kind, value) in planner.planned.items():
            if key in planner.whole:  # every tensor in it is a live one
                decoded[key] = (kind, value)
                continue
            items, copy = restored.items, False
            if kind == "$stateful":  # each tensor its own (a module copies what it loads)
                copy = restored.lent or not isinstance(state[key], torch.nn.Module)
            elif restored.lent:  # a plain value is kept: out of the step files, in one block
                names: List[str] = []
                _placeholder_items(value, names)
                items = restored.owned_copy(list(dict.fromkeys(names))) if names else {}
            decoded[key] = (kind, _materialize(value, items, restored.step, copy))
        leftover = [(dst, _materialize(src, restored.items, restored.step, False))
                    for dst, src in planner.leftover]
    except _Unplanned:
        return None
    _copy_into(leftover)
    return decoded, len(planner.done)


def decode_again(planner: _Planner, restored: strata.Restored, state: Dict[str, Any],
                 directory: str) -> Tuple[Dict[str, Tuple[str, Any]], int]:
    """Decodes and checks every entry from the restored items (raising
    what does not fit), then copies what the stager did not; returns the
    entries and the items the stager copied in place."""
    entries = _read_tree(restored, directory)
    for key in state:
        if key not in entries:
            raise strata.InvalidArgumentError(
                f"step {restored.step} has no entry '{key}' (it has: "
                f"{', '.join(sorted(entries))})")
    # Decode and check everything before loading anything: a mismatch in
    # one entry leaves every object as it was.
    copies: List[Tuple[torch.Tensor, torch.Tensor]] = []
    reading = _Reading(restored.step, restored.items)
    decoded = {key: check_entry(key, value, entries[key], reading, restored.lent, copies)
                for key, value in state.items()}
    done = planner.done if planner.step == restored.step else set()
    items = {a.__array_interface__["data"][0]: name for name, a in restored.items.items()
             if a.size}
    rest = [(d, s) for d, s in copies if (items.get(s.data_ptr()), d.data_ptr()) not in done]
    _copy_into(rest)
    return decoded, len(copies) - len(rest)


def _entries(step: int, blob: bytes) -> Dict[str, Any]:
    tree = json.loads(blob)
    if tree.get("format") != _FORMAT:
        raise strata.InvalidArgumentError(
            f"step {step}: state tree format {tree.get('format')} is not {_FORMAT}")
    return tree["entries"]


def _read_tree(restored: strata.Restored, directory: str) -> Dict[str, Any]:
    blob = restored.items.get(TREE_ITEM)
    if blob is None:
        raise strata.InvalidArgumentError(
            f"step {restored.step} in {directory} was not saved by strata.torch "
            f"(no {TREE_ITEM} item); use strata.Checkpointer.restore() for it")
    tree = json.loads(blob.tobytes())
    if tree.get("format") != _FORMAT:
        raise strata.InvalidArgumentError(
            f"step {restored.step}: state tree format {tree.get('format')} is not "
            f"{_FORMAT}")
    return tree["entries"]


def check_entry(key: str, target: Any, node: Dict[str, Any], restored: Any,
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


def load_entry(kind: str, target: Any, value: Any) -> Any:
    if kind == "$generator":
        target.set_state(value)
        return target
    if kind == "$stateful":
        target.load_state_dict(value)
        return target
    return value
