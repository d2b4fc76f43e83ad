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

import weakref
from typing import Any, Dict, List, Optional

import torch

import strata
from strata._arena import release_staged, stage_state_dict
from strata._gc import gc_paused
from strata._overlap import _Pending
from strata._restore import _Planner, decode_again, finish_planned, load_entry
from strata._rng import RNGState, _device_generators  # noqa: F401 (tests call the latter)
from strata._tree import (TREE_ITEM, _FORMAT, _TORCH_DTYPES, _bits, _Encoder,  # noqa: F401
                          _is_dtensor, _is_stateful, tree_item)

__all__ = ["Checkpointer", "RNGState", "TREE_ITEM", "stage_state_dict", "release_staged"]


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
        self._encoded: Optional[_Encoder] = None  # the last encode, for the next one
        self._keep: List[Any] = []           # what the last save's copies read
        self._pipelined = 0                  # for tests: the items the stager copied in place

    def should_save(self, step: int) -> bool:
        return self._ckpt.should_save(step)

    def _encode(self, state: Dict[str, Any], optimizers: List[Any],
                sizing: bool = False) -> _Encoder:
        """The items and tree of `state`; with `optimizers` (an overlapped
        save), the CUDA tensors only they change are deferrable. What is as
        the last encode had it (the layout, each tensor's memory, dtype and
        shape; the tree) is taken from it rather than asked of torch again.
        `sizing`: for a reservation (see _Encoder)."""
        previous = self._encoded
        encoder = _Encoder(previous, sizing=sizing)
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
        encoder.tree = tree
        if previous is not None and previous.tree == tree:
            encoder.tree_item = previous.tree_item  # the same bytes: not encoded again
        else:
            encoder.tree_item = tree_item({"format": _FORMAT, "entries": tree})
        encoder.host(encoder.tree_item, TREE_ITEM)
        self._encoded = encoder
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
        # What the copies still read: nothing once a blocking save returned.
        # Contiguous copies made for the save (on the GPU for a strided CUDA
        # tensor) go with it; the encoder keeps only its records.
        self._keep = encoder.keep if pending is not None else []
        encoder.keep = []
        self._pending = pending  # the last save's were waited for by this one
        if pending is not None:
            for o in optimizers:
                self._hook(o)
        return result

    def reserve(self, state: Dict[str, Any]) -> None:
        """Prepares, in the background, the host memory a save of `state` will
        take (the step files, mapped and page-locked), so that the first save
        sets nothing up on the training thread. restore() calls it once the
        state is restored, and after a fresh start the first optimizer step
        does; call it yourself when the state's size changes."""
        with gc_paused():
            encoder = self._encode(state, [], sizing=True)  # no copy made to size it
            encoder.keep = []
            batch = self._batch_for(encoder.specs)
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
        calls it first. Each stream is ordered once per save, so optimizers
        stepping on different streams are each ordered. During a CUDA graph
        capture it waits for the copies on the host instead. Cheap when
        there is nothing to wait for."""
        if self._pending is not None:
            self._pending.order()

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
        # Python's collector is paused while the planner runs (on a reading
        # thread) and until the entries are loaded: by then the containers
        # of the plan (tens of thousands for a big state) are freed, and no
        # collection walks them or moves them to the older generations,
        # whose collections walk every object of the process.
        with gc_paused():
            restored_step = self._restore_paused(state, step)
        if restored_step is None:
            self._reserve_after_first_step(state)
            return None
        if not self._ckpt.staging["bytes"]:  # a fresh process: nothing set up to save into
            self.reserve(state)
        return restored_step

    def _restore_paused(self, state: Dict[str, Any], step: Optional[int]) -> Optional[int]:
        """restore() with the collector paused: what it makes is freed when
        this returns."""
        planner = _Planner(state)
        restored = self._ckpt.restore_planned(TREE_ITEM, planner, step=step)
        self._pending = None  # the restore waited for the last save's copies
        if restored is None:
            return None
        decoded, self._pipelined = finish_planned(planner, restored, state) or \
            decode_again(planner, restored, state, self._ckpt.directory)
        for key, (kind, value) in decoded.items():
            state[key] = load_entry(kind, state[key], value)
        return restored.step

    def wait(self) -> None:
        """Waits on the host for the save in flight (its copies included).
        Orders no stream: called from another thread than the training
        loop's, it must not take the ordering the loop's next optimizer step
        makes on its own current streams (the pre-step hook still does). It
        waits for the commit without holding the checkpointer's other calls,
        so the loop's next step does not wait for it."""
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
        self._ckpt.close()  # waits for the save in flight, as wait() does
        self._pending = None  # its copies are done: nothing is left to order
        for handle in list(self._hooks.values()) + self._reserve_hooks:
            handle.remove()
        self._hooks.clear()
        self._reserve_hooks = []
        self._keep = []
        self._encoded = None

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
