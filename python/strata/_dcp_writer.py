"""StrataStorageWriter: DCP's StorageWriter and AsyncStager over Strata. Each
rank commits its whole local plan and DCP's global Metadata as one Strata
step (strata/dcp.py's docstring is the design); staging goes through
strata.torch's page-locked arena."""

import dataclasses
import os
from collections import ChainMap
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch
from torch.distributed.checkpoint.default_planner import create_default_global_save_plan
from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex
from torch.distributed.checkpoint.planner import SavePlan
from torch.distributed.checkpoint.staging import AsyncStager
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

import strata
from strata import dcp_metadata
from strata._arena import _Arena, _stage, stage_state_dict
from strata._dcp_copies import METADATA_ITEM, _group_rank, _handshake
from strata._dcp_items import _hashed_name, _item_name, _nbytes, _parse_step, _to_item
from strata._gc import gc_paused


class _Held(NamedTuple):
    """What a rank's local plan carries to the coordinator: every index of
    its state dict, replicated ones included (the planner may then keep
    some of them on another rank only)."""
    indices: Tuple[MetadataIndex, ...]


def _global_metadata(plans: List[SavePlan]) -> Metadata:
    """The Metadata DCP's DefaultSavePlanner builds from the deduplicated
    plans: every tensor's chunks and every bytes item once, and the ranks'
    flattening maps merged."""
    _, metadata = create_default_global_save_plan(plans, rewrite_index_hints=False)
    mappings = [p.planner_data for p in plans]
    if mappings and all(isinstance(m, dict) for m in mappings):
        metadata.planner_data = dict(ChainMap(*mappings))
    metadata.version = CURRENT_DCP_VERSION
    return metadata


def _check_planner(planner: Any, metadata: Metadata) -> None:
    """Refuses a planner whose Metadata (on the coordinator, where it has
    one) is not the one the writer built, and plan caching."""
    if getattr(planner, "_enable_plan_caching", False):
        raise strata.InvalidArgumentError(
            "StrataStorageWriter: enable_plan_caching is not supported (each rank writes its "
            "whole local plan)")
    theirs = getattr(planner, "metadata", None)
    if isinstance(theirs, Metadata) and \
            theirs.state_dict_metadata != metadata.state_dict_metadata:
        raise strata.InvalidArgumentError(
            "StrataStorageWriter: the planner's Metadata is not the one DCP's default planner "
            "builds from its plans; use DefaultSavePlanner (or none)")


class StrataStorageWriter(StorageWriter, AsyncStager):
    """A DCP StorageWriter (and AsyncStager) that saves each rank's items as
    a Strata step of its directory. Use with DCP's default planner (or any
    that plans as DefaultSavePlanner does) and checkpoint_id=<step>, an int
    or a path ending in the step ("step-N": TorchTitan's folders).

    `directory`: this rank's checkpoint directory, e.g. a RAM disk; "{rank}"
    in it is replaced by the rank. With `agent_job` (a strata.AgentJob for
    this rank) it is the node agent's directory: the agent replicates and
    backs up every step, and the writer performs the agent handshake before
    its first save unless a StrataStorageReader of this process did.
    Other keywords go to strata.Checkpointer (io_threads, chunk_size,
    max_to_keep: default 2, 0 with an agent; preemption_signals: default
    none). Saves are synchronous inside DCP (async_save=False): DCP's
    async_save runs them in its own thread after stage() copied the state.

    Thread-safety: DCP calls one method at a time; close() after the last
    save (DCP does not close a stager it was handed).
    """

    _synchronize_after_execute = False  # stage() returns a finished copy

    def __init__(self, directory: str, *, agent_job: Optional[strata.AgentJob] = None,
                 **options: Any) -> None:
        self._template = os.fspath(directory)
        self._agent_job = agent_job
        self._options = dict(options, async_save=False)
        self._options.setdefault("preemption_signals", [])
        if agent_job is not None:
            self._options["max_to_keep"] = 0
        self._ckpt: Optional[strata.Checkpointer] = None
        self._step: Optional[int] = None    # from reset(checkpoint_id)
        self._saving: Optional[int] = None  # the step of the save under way
        self._writing: Optional[int] = None  # the step write_data is writing, in DCP's thread
        self._staged = False  # stage() filled the arena for an async save not yet written
        self._rank: Optional[int] = None     # from set_up_storage_writer, else the default group
        self._local_items: List[Any] = []    # the rank's whole local plan, for write_data
        self.last_result: Optional[strata.SaveResult] = None

    @property
    def checkpointer(self) -> strata.Checkpointer:
        """The rank's strata.Checkpointer (opened on first use), e.g. for
        should_save(step) with preemption_signals=[signal.SIGTERM]; after a
        save, `last_result` is its SaveResult (on_demand, should_exit)."""
        return self._checkpointer()

    def reset(self, checkpoint_id: Any = None) -> None:
        self._step = None if checkpoint_id is None else _parse_step(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        try:
            _parse_step(checkpoint_id)
            return True
        except strata.InvalidArgumentError:
            return False

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        # Each save names its step: reset(checkpoint_id) comes only with one.
        self._saving, self._step = self._step, None
        if self._saving is None:
            raise strata.InvalidArgumentError(
                "StrataStorageWriter saves a step: pass checkpoint_id=<step> to dcp.save / "
                "dcp.async_save")
        if kwargs.get("rank") is not None:
            self._rank = kwargs["rank"]

    @gc_paused()
    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        """Keeps the rank's whole local plan (the rank writes every item of
        it, whatever the planner deduplicates) and tells the coordinator
        which indices the rank holds."""
        if not plan.usable:
            raise strata.InvalidArgumentError(
                "StrataStorageWriter: the planner's plan caching is not supported (each "
                "rank writes its whole local plan)")
        self._local_items = list(plan.items)
        return dataclasses.replace(plan, storage_data=_Held(tuple(i.index for i in plan.items)))

    @gc_paused()
    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        """Builds the Metadata from the planner's deduplicated plans, as
        DCP's default planner does, names every item and records in it
        which ranks hold each (every rank that has it), and hands it to
        every rank with its plan."""
        if not all(isinstance(p.storage_data, _Held) for p in plans):
            raise strata.InvalidArgumentError(
                "StrataStorageWriter: the planner replaced the writer's storage_data in the "
                "plans (use DCP's DefaultSavePlanner, or a planner that keeps it)")
        metadata = _global_metadata(plans)
        holders: Dict[MetadataIndex, List[int]] = {}
        for rank, plan in enumerate(plans):
            for index in plan.storage_data.indices:
                holders.setdefault(index, []).append(rank)
        names: Dict[str, MetadataIndex] = {}
        locations = {}
        for index, ranks in holders.items():
            name = _item_name(index)
            if name in names:  # "a@0" as a name of bytes and of a chunk
                name = _hashed_name(index)
            names[name] = index
            locations[index] = (name, tuple(ranks))
        metadata.storage_data = locations
        return [dataclasses.replace(p, storage_data=(metadata, len(plans))) for p in plans]

    def write_data(self, plan: SavePlan, planner: Any) -> Future:
        """Commits the rank's step: every item of its local plan (replicated
        ones included) and the Metadata. WriteResults are for the items the
        planner gave this rank."""
        items, results, live = self._items(plan, planner)
        self._writing = self._saving
        try:
            self.last_result = self._checkpointer().save(self._saving, items)
        finally:
            self._writing = None
            if not live:
                self._staged = False  # an async save's snapshot, written (or failed)
        future: Future = Future()
        future.set_result(results)
        return future

    @gc_paused()
    def _items(self, plan: SavePlan,
               planner: Any) -> Tuple[Dict[str, Any], List[WriteResult], bool]:
        """The step's items by name (the Metadata's among them), the
        WriteResults, and whether any item was live on a device (see
        _on_host). The collector is paused here, not while the step is
        committed, the longest part: in an async save (DCP's thread)
        training runs meanwhile."""
        metadata, world = plan.storage_data
        _check_planner(planner, metadata)
        resolved, live = self._on_host([planner.resolve_data(i) for i in self._local_items])
        items, sizes = {}, {}
        for item, data in zip(self._local_items, resolved):
            name = metadata.storage_data[item.index][0]
            items[name] = _to_item(data)
            sizes[item.index] = _nbytes(items[name])
        results = [WriteResult(index=item.index, size_in_bytes=sizes[item.index],
                               storage_data=metadata.storage_data[item.index][0])
                   for item in plan.items]
        self._local_items = []
        items[METADATA_ITEM] = (dcp_metadata.encode(
            metadata, step=self._saving, rank=self._own_rank(), world_size=world,
            locations=metadata.storage_data), "bytes")
        return items, results, live

    def _on_host(self, resolved: List[Any]) -> Tuple[List[Any], bool]:
        """A synchronous save's CUDA tensors copied to host memory in one
        batch (strata.copy_to_host: each on a stream of Strata's own per
        device, after the device's current stream), not one synchronous
        .cpu() each: into stage()'s page-locked arena, or, while that holds
        an async save's snapshot still to be written, into ordinary memory
        freed after the save. Returns the items and whether any was live
        on a device (an async save's items are staged already)."""
        live = {i: d for i, d in enumerate(resolved)
                if isinstance(d, torch.Tensor) and d.is_cuda}
        if not live:
            return resolved, False
        staged = _stage(live, _Arena(pin=False))[0] if self._staged else stage_state_dict(live)
        return [staged.get(i, d) for i, d in enumerate(resolved)], True

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        """Nothing is left: each rank's write_data committed its step with the
        Metadata in it, so the checkpoint is complete when every rank's is."""

    def stage(self, state_dict: Any) -> Any:
        """A copy of the state dict in host memory, which training may change
        as soon as this returns. The staging memory is reused by the next
        stage(): one async save in flight at a time. A stage() while the
        previous save is still being written is refused (it would change
        what that save writes); one while it is still planning is not
        detected: wait for the previous save's future first. The collector
        is not paused here, on the training thread: the collection a pause
        defers would start there as it ended (measured: full collections
        moved into async_save's return)."""
        writing = self._writing
        if writing is not None:
            raise strata.FailedPreconditionError(
                f"dcp.async_save: step {writing} is still being written from the staging "
                "memory this save would reuse; wait for its future first")
        staged = stage_state_dict(state_dict)
        self._staged = True
        return staged

    def synchronize_staging(self) -> None:
        """Nothing to wait for: stage() returns a finished copy."""

    def close(self) -> None:
        """Closes the rank's checkpointer (waits for nothing: saves are
        synchronous inside DCP). Idempotent."""
        if self._ckpt is not None:
            self._ckpt.close()
            self._ckpt = None

    def _own_rank(self) -> int:
        return _group_rank(None)[0] if self._rank is None else self._rank

    def _checkpointer(self) -> strata.Checkpointer:
        if self._ckpt is None:
            directory = self._template.format(rank=self._own_rank())
            if self._agent_job is not None:
                os.makedirs(directory, exist_ok=True)
                _handshake(directory, self._agent_job)
            self._ckpt = strata.Checkpointer(directory, **self._options)
        return self._ckpt
