"""stage_state_dict(): a snapshot of a state dict's tensors in a reusable
host arena, for callers that read the snapshot themselves (DCP's
AsyncStager). strata.torch's own saves do not use it: they copy straight
into the step's files through the stager (python/src/stager.cc)."""

import threading
import warnings
from typing import Any, Dict, List, Optional, Tuple

import torch

import strata
from strata._tree import _bits, _is_dtensor, _map_containers

_ALIGN = 64  # every tensor starts on a 64-byte boundary of the arena
_warned_unpinned = False


class _Arena:
    """Host memory that tensors are copied into: one uint8 tensor, grown
    (never shrunk) when a state needs more. Page-locked when CUDA is
    available, so device->host copies run at full speed: the tensor's own
    pages, registered with the CUDA runtime (cudaHostRegister) and released
    with it. (torch's pinned allocator would round the size up to a power of
    two and keep freed blocks page-locked for reuse: a 20 GiB state would
    hold 32 GiB, and a grown arena the old block beside the new one.) When
    page-locking fails it is ordinary memory and a RuntimeWarning says so
    once per process."""

    def __init__(self, pin: bool = True) -> None:
        self.buffer: Optional[torch.Tensor] = None
        self._pin = pin  # False: ordinary memory (a one-off copy, freed with the tensors)
        self._registered = 0  # the address page-locked, or 0

    @property
    def nbytes(self) -> int:
        return 0 if self.buffer is None else self.buffer.numel()

    def ensure(self, nbytes: int) -> None:
        if nbytes <= self.nbytes:
            return
        nbytes = (max(nbytes, 1) + (1 << 16) - 1) & ~((1 << 16) - 1)
        self.release()  # the old one first
        buffer = torch.empty(nbytes, dtype=torch.uint8)
        if self._pin and torch.cuda.is_available():
            try:
                strata.page_lock(buffer.data_ptr(), nbytes)
                self._registered = buffer.data_ptr()
            except strata.Error as e:
                global _warned_unpinned
                if not _warned_unpinned:
                    _warned_unpinned = True
                    warnings.warn(f"strata.torch: cannot page-lock {nbytes} bytes of host "
                                  f"memory ({e}); staging in pageable memory, device copies "
                                  "will be slower and synchronous", RuntimeWarning, stacklevel=4)
        self.buffer = buffer

    def release(self) -> None:
        """Unlocks the pages and drops the arena; tensors staged over it keep
        its memory alive as ordinary memory."""
        if self._registered:
            strata.page_unlock(self._registered)
            self._registered = 0
        self.buffer = None


class _StagedTensor:
    __slots__ = ("source", "dtype", "shape", "offset", "key")

    def __init__(self, source: torch.Tensor, dtype: torch.dtype, shape: Tuple[int, ...],
                 key: Optional[Tuple]) -> None:
        self.source, self.dtype, self.shape, self.offset = source, dtype, shape, 0
        self.key = key  # the original's _key() when the copy reads its own memory, else None


def _key(t: torch.Tensor) -> Tuple:
    """What makes a tensor the same one for a staged layout: its memory,
    dtype, shape and strides (and neither conjugated nor negated lazily)."""
    return (t.data_ptr(), t.dtype, t.shape, t.stride(), t.is_conj() or t.is_neg())


class _Layout:
    """The last state staged, kept while the arena is: each tensor's key in
    the order the state dict walks them, the tensor returned for it (a view
    over the arena) and the copy's arguments. A state whose tensors are the
    same ones in the same order is staged by redoing the copy alone."""
    __slots__ = ("buffer", "keys", "views", "copy")

    def __init__(self, buffer: torch.Tensor, keys: List[Tuple], views: List[torch.Tensor],
                 copy: Tuple[List[int], List[int], List[int], List[int]]) -> None:
        self.buffer, self.keys, self.views, self.copy = buffer, keys, views, copy


class _Changed(Exception):
    """A tensor of the state is not the layout's (the layout is rebuilt)."""


class _StagedDTensor:
    __slots__ = ("dtensor", "local")

    def __init__(self, dtensor: Any, local: Any) -> None:
        self.dtensor, self.local = dtensor, local


def _copy(arena: _Arena, staged: List[_StagedTensor]) -> Tuple[List[int], ...]:
    """Copies every tensor into the arena in one call to libstrata
    (strata.copy_to_host): CPU ones by memcpy, CUDA ones on a stream of
    Strata's own per device after the device's current stream; returns when
    all are done. Returns the copy's arguments."""
    total = 0
    for s in staged:
        s.offset = total
        total += (s.source.nbytes + _ALIGN - 1) & ~(_ALIGN - 1)
    arena.ensure(total)
    base = arena.buffer.data_ptr()
    args = ([s.source.data_ptr() for s in staged], [s.source.nbytes for s in staged],
            [s.source.get_device() if s.source.is_cuda else -1 for s in staged],
            [base + s.offset for s in staged])
    _copy_again(args)
    return args


def _copy_again(args: Tuple[List[int], List[int], List[int], List[int]]) -> None:
    """strata.copy_to_host of (sources, sizes, devices, destinations), each
    device's copies after the work enqueued on its current stream now."""
    streams = {d: torch.cuda.current_stream(d).cuda_stream for d in set(args[2]) if d >= 0}
    strata.copy_to_host(*args, streams=streams)


_stage_lock = threading.Lock()
_arena = _Arena()
_last: Optional[_Layout] = None  # the layout of the last state staged in _arena


def stage_state_dict(state_dict: Any) -> Any:
    """Snapshots the tensors of a (flat or nested) state_dict into a reusable
    host arena, page-locked when CUDA is available: one device->host copy per
    GPU tensor; CPU tensors are copied too.

    Returns the same structure (dicts, lists, tuples) with every tensor
    replaced by a CPU tensor of its dtype and shape over the arena (a
    DTensor by a DTensor over its staged local shard, same mesh and
    placements; other values are returned as they are). When it returns,
    every copy is complete: the caller may change the originals at once.

    The returned tensors stay valid until the next stage_state_dict() call
    or release_staged(), which reuse or free the arena: finish reading them
    (e.g. writing them out) first, and do not keep them. One arena per
    process, shared by all callers of this function; thread-safe, callers
    take turns."""
    with _stage_lock:
        global _last
        if _last is not None and _last.buffer is _arena.buffer:
            try:
                return _stage_again(state_dict, _last)
            except _Changed:
                pass
        _last = None
        staged, layout = _stage(state_dict, _arena)
        _last = layout
        return staged


def _stage_again(state_dict: Any, layout: _Layout) -> Any:
    """`state_dict` staged over `layout` (its tensors copied again into the
    views made for the last state); raises _Changed, having copied nothing,
    unless its tensors are that state's, in the same order."""
    keys, views, n = layout.keys, layout.views, len(layout.keys)
    i = 0

    def reuse(value: Any) -> Any:
        nonlocal i
        if isinstance(value, torch.Tensor):
            dtensor = _is_dtensor(value)
            t = value.to_local() if dtensor else value
            if i >= n or _key(t) != keys[i]:
                raise _Changed
            i += 1
            view = views[i - 1]
            return type(value)(view, value._spec, requires_grad=False) if dtensor else view
        return _map_containers(value, reuse)

    staged = reuse(state_dict)
    if i != n:
        raise _Changed
    _copy_again(layout.copy)
    return staged


def _stage(state_dict: Any, arena: _Arena) -> Tuple[Any, Optional[_Layout]]:
    """stage_state_dict()'s work, into `arena`: the staged state, and its
    layout where every tensor was copied from its own memory."""
    staged: List[_StagedTensor] = []

    def collect(value: Any) -> Any:
        if _is_dtensor(value):
            return _StagedDTensor(value, collect(value.to_local()))
        if isinstance(value, torch.Tensor):
            t = value.detach().resolve_conj().resolve_neg()
            if t.layout != torch.strided or t.is_quantized:
                raise TypeError("stage_state_dict: only dense tensors are supported")
            bits = _bits(t)
            if not bits.is_contiguous():
                bits = bits.contiguous()  # on its device; the copy reads one block
            if not (bits.is_cuda or bits.is_cpu):
                bits = bits.cpu()
            own = bits.data_ptr() == value.data_ptr() and not (value.is_conj() or value.is_neg())
            staged.append(_StagedTensor(bits, t.dtype, tuple(t.shape),
                                        _key(value) if own else None))
            return staged[-1]
        return _map_containers(value, collect)

    plan = collect(state_dict)
    args = _copy(arena, staged)
    buffer = arena.buffer
    views: List[torch.Tensor] = []

    def build(node: Any) -> Any:
        if isinstance(node, _StagedTensor):
            n = node.source.numel() * node.source.element_size()
            if n == 0:
                views.append(torch.empty(node.shape, dtype=node.dtype))
                return views[-1]
            raw = buffer[node.offset:node.offset + n]
            views.append(raw.view(node.source.dtype).view(node.source.shape).view(node.dtype))
            return views[-1]
        if isinstance(node, _StagedDTensor):
            # Over the staged shard itself: from_local() would move it to
            # the mesh's device (a copy of the state in GPU memory again).
            d = node.dtensor
            return type(d)(build(node.local), d._spec, requires_grad=False)
        return _map_containers(node, build)

    tree = build(plan)
    keys = [s.key for s in staged]
    if any(k is None for k in keys):  # a copy made first: not the tensor's own memory
        return tree, None
    return tree, _Layout(buffer, keys, views, args)


def release_staged() -> None:
    """Frees stage_state_dict()'s arena; the tensors it returned become invalid."""
    global _last
    with _stage_lock:
        _last = None
        _arena.release()
