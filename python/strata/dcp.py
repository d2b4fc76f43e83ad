"""PyTorch Distributed Checkpoint (torch.distributed.checkpoint, "DCP")
through Strata's tiers.

    import torch.distributed.checkpoint as dcp
    from strata.dcp import StrataStorageReader, StrataStorageWriter

    job = strata.AgentJob("llama", node_rank=rank, nodes=world)
    reader = StrataStorageReader(directory, agent_job=job)
    if reader.step is not None:                     # None: start fresh
        dcp.load(state, storage_reader=reader)
    writer = StrataStorageWriter(directory, agent_job=job)
    dcp.async_save(state, storage_writer=writer, checkpoint_id=step,
                   process_group=checkpoint_group)    # DCP's own planner

docs/python.md ("PyTorch Distributed Checkpoint") is the guide. The design:

* Each rank's write items are that rank's Strata step `checkpoint_id` in
  its own directory (with an agent job: the node agent's directory, so the
  agent replicates it to peers and backs it up). An item is named by its
  MetadataIndex: `fqn` for bytes and 0-d tensors, `fqn@o0,o1,...` for the
  tensor chunk at those offsets (a hash when that is no valid item name).
* DCP's global `Metadata` is in every rank's step, as the item
  `__strata_dcp__` (JSON, with the rank and world size: dcp_metadata.py;
  nothing is unpickled on a restore), written in the same atomic commit as
  the rank's data. Why every rank's and not only the coordinator's: a
  node's step is then self-sufficient, so the step the agent restores for a
  node (from its RAM, a peer or the backup) is all that node needs, and no
  rank waits for rank 0's data to learn the layout. A step is complete for
  the job exactly when every rank's commit is: the agent's "newest step
  complete on every node" is a consistent DCP checkpoint, and `finish` has
  nothing left to write. The price: the coordinator sends the Metadata to
  every rank with its plan, O(ranks x metadata) bytes per save.
* Replicated items (plain tensors and bytes every rank has, DDP/HSDP
  replicas): DCP's planner (any planner that plans as DefaultSavePlanner
  does) keeps each on one rank only. The writer keeps each rank's whole
  local plan and writes its own copy of every item it has, so a rank's step
  holds everything that rank loads at the same world size and layout; it
  builds the Metadata from the planner's deduplicated plans as DCP does,
  and Metadata.storage_data maps each index to (item, ranks holding it).
* Loading picks the step: the agent's (the handshake, once per process and
  directory), else the newest step every rank has in its own directory.
  Items of other ranks (another world size or layout: DCP resharding) are
  read from the nearest tier that holds them: this rank's step, a copy on
  this node (the agent's store: its peers' replicas; other ranks'
  directories in local mode), another rank of the job that holds one on its
  node (sent over the process group), a file:// backup.
"""

import copy
import dataclasses
import hashlib
import io
import os
import re
import threading
from collections import ChainMap
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.default_planner import create_default_global_save_plan
from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, SavePlan
from torch.distributed.checkpoint.staging import AsyncStager
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.distributed.tensor import DTensor
from torch.futures import Future

import strata
import strata.torch
from strata import dcp_metadata
from strata._dcp_copies import (_ANCHOR, _BACKUP, _DIR, _NEAR, METADATA_ITEM, _backup_copies,
                                _backup_root, _backups, _check_bytes_item, _committed_steps,
                                _Copy, _dir_copies, _group_rank, _read_info, _readable,
                                _store_copies)

__all__ = ["METADATA_ITEM", "StrataStorageReader", "StrataStorageWriter"]

_UNCHOSEN = object()  # the reader has not chosen its step yet
_NUMPY_DTYPES = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                 torch.uint16, torch.uint32, torch.uint64, torch.float16, torch.float32,
                 torch.float64}


# ---- items ------------------------------------------------------------------

def _item_name(index: MetadataIndex) -> str:
    """The Strata item of a write item: `fqn` (bytes, 0-d tensors), or
    `fqn@o0,o1,...` for the tensor chunk at those offsets."""
    name = index.fqn if not index.offset else \
        f"{index.fqn}@{','.join(str(o) for o in index.offset)}"
    if ("/" in name or ".." in name or "\0" in name or name in ("", ".")
            or name.startswith(METADATA_ITEM) or len(name.encode()) > 1000):
        return _hashed_name(index)
    return name


def _hashed_name(index: MetadataIndex) -> str:
    offset = None if index.offset is None else tuple(index.offset)
    return "item-" + hashlib.sha1(repr((index.fqn, offset)).encode()).hexdigest()


def _to_item(data: Any) -> Any:
    """A tensor or BytesIO as a value for strata.Checkpointer.save."""
    if isinstance(data, io.BytesIO):
        return data.getvalue(), "bytes"
    t = data.detach().resolve_conj().resolve_neg()
    t = (t if t.device.type == "cpu" else t.cpu()).contiguous()
    if t.dtype in _NUMPY_DTYPES:
        return t.numpy()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy(), "bfloat16"
    return t.reshape(-1).view(torch.uint8).numpy(), "bytes"


def _nbytes(value: Any) -> int:
    data = value[0] if isinstance(value, tuple) else value
    return len(data) if isinstance(data, bytes) else data.nbytes


def _from_item(array: numpy.ndarray, dtype: torch.dtype, sizes: torch.Size) -> torch.Tensor:
    """A restored item's bytes as a tensor of `dtype` and `sizes`."""
    raw = torch.from_numpy(numpy.ascontiguousarray(array).reshape(-1).view(numpy.uint8))
    return raw.view(dtype).reshape(sizes)


def _narrow(t: torch.Tensor, offsets: torch.Size, lengths: torch.Size) -> torch.Tensor:
    for dim, (offset, length) in enumerate(zip(offsets, lengths)):
        t = t.narrow(dim, offset, length)
    return t


def _parse_step(checkpoint_id: Any) -> int:
    """The step a checkpoint_id names: an int, "N", or a path ending in
    "N" or "step-N" (TorchTitan's folders)."""
    if isinstance(checkpoint_id, int) and checkpoint_id >= 0:
        return checkpoint_id
    m = re.fullmatch(r"(?:step[-_]?)?(\d+)", os.path.basename(os.fspath(str(checkpoint_id))))
    if m is None:
        raise strata.InvalidArgumentError(
            f"checkpoint_id {checkpoint_id!r} names no step: pass the step (an int, 'N' or "
            "a path ending in 'step-N')")
    return int(m.group(1))


# ---- staging ------------------------------------------------------------------

def _stage_state_dict(state_dict: Any) -> Any:
    """A copy of `state_dict` whose tensors are new CPU tensors (DTensors keep
    their mesh and placements around the copied local shard), CPU tensors
    included, and whose other values are deep copies: training may change
    the original as soon as this returns."""
    if isinstance(state_dict, DTensor):
        local = _stage_state_dict(state_dict.to_local())
        return DTensor.from_local(local, state_dict.device_mesh, state_dict.placements,
                                  shape=state_dict.shape, stride=state_dict.stride(),
                                  run_check=False)
    if isinstance(state_dict, torch.Tensor):
        return state_dict.detach().to("cpu", copy=True)
    if isinstance(state_dict, dict):
        return type(state_dict)((k, _stage_state_dict(v)) for k, v in state_dict.items())
    if isinstance(state_dict, (list, tuple)):
        return type(state_dict)(_stage_state_dict(v) for v in state_dict)
    return copy.deepcopy(state_dict)


def _stage(state_dict: Any) -> Any:
    """strata.torch.stage_state_dict where it exists (one copy into a reused,
    page-locked arena: valid until its next call), else _stage_state_dict."""
    return getattr(strata.torch, "stage_state_dict", _stage_state_dict)(state_dict)


# ---- the agent handshake, once per process and directory -------------------

# (directory, job) -> (steps_dir, step) or None. The handshake starts the
# job's incarnation on the node: the reader and the writer of one process
# share it (a second one would start a new restore round for the whole job).
# The writer's may run in DCP's async thread: a second caller waits for the
# first one's answer.
_handshakes: Dict[Tuple[str, str], Optional[Tuple[str, int]]] = {}  # GUARDED_BY(_handshake_mu)
_handshake_mu = threading.Lock()


def _handshake(directory: str, job: strata.AgentJob) -> Optional[Tuple[str, int]]:
    key = (os.path.realpath(directory), job.job)
    with _handshake_mu:
        if key not in _handshakes:
            _handshakes[key] = strata.agent_handshake(directory, job)
        return _handshakes[key]


# ---- saving -------------------------------------------------------------------------

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
        metadata, world = plan.storage_data
        _check_planner(planner, metadata)
        items, sizes = {}, {}
        for item in self._local_items:
            name = metadata.storage_data[item.index][0]
            items[name] = _to_item(planner.resolve_data(item))
            sizes[item.index] = _nbytes(items[name])
        results = [WriteResult(index=item.index, size_in_bytes=sizes[item.index],
                               storage_data=metadata.storage_data[item.index][0])
                   for item in plan.items]
        self._local_items = []
        items[METADATA_ITEM] = (dcp_metadata.encode(
            metadata, step=self._saving, rank=self._own_rank(), world_size=world,
            locations=metadata.storage_data), "bytes")
        self._writing = self._saving
        try:
            self.last_result = self._checkpointer().save(self._saving, items)
        finally:
            self._writing = None
        future: Future = Future()
        future.set_result(results)
        return future

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        """Nothing is left: each rank's write_data committed its step with the
        Metadata in it, so the checkpoint is complete when every rank's is."""

    def stage(self, state_dict: Any) -> Any:
        """A copy of the state dict in host memory, which training may change
        as soon as this returns. The staging memory is reused by the next
        stage(): one async save in flight at a time. A stage() while the
        previous save is still being written is refused (it would change
        what that save writes); one while it is still planning is not
        detected: wait for the previous save's future first."""
        writing = self._writing
        if writing is not None:
            raise strata.FailedPreconditionError(
                f"dcp.async_save: step {writing} is still being written from the staging "
                "memory this save would reuse; wait for its future first")
        return _stage(state_dict)

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


# ---- loading ---------------------------------------------------------------------

@dataclasses.dataclass
class _Route:
    """What one rank reads (item -> the saved rank whose copy it reads
    here), receives [(transfer, from rank, saved rank, item)] and sends
    [(transfer, to rank, saved rank, item)]."""
    reads: Dict[str, int] = dataclasses.field(default_factory=dict)
    receives: List[Tuple[int, int, int, str]] = dataclasses.field(default_factory=list)
    sends: List[Tuple[int, int, int, str]] = dataclasses.field(default_factory=list)


def _nearest(copies: Dict[int, str], holders: Tuple[int, ...], tiers: Tuple[str, ...]):
    """The holder whose copy is in the nearest of `tiers`, or None."""
    found = [(tiers.index(copies[q]), q) for q in holders if copies.get(q) in tiers]
    return min(found)[1] if found else None


def _server(inventories: List[Dict[int, str]], holders: Tuple[int, ...], rank: int):
    """(rank, saved rank): another rank with a holder's copy on its node,
    preferring one that has it in memory already (its anchor); or None."""
    found = [(_NEAR.index(inv[q]), p, q) for p, inv in enumerate(inventories) if p != rank
             for q in holders if inv.get(q) in _NEAR]
    return min(found)[1:] if found else None


def _route(inventories: List[Dict[int, str]], plans: List[LoadPlan],
           locations: Dict[MetadataIndex, Tuple[str, Tuple[int, ...]]], step: int) -> List[_Route]:
    """Where each rank reads each item it needs: a copy on its node, else
    from a rank that has one on its node (over the process group), else from
    the backup."""
    routes = [_Route() for _ in plans]
    transfer = 0
    for rank, plan in enumerate(plans):
        seen = set()
        for read_item in plan.items:
            item, holders = locations[read_item.storage_index]
            if item in seen:
                continue
            seen.add(item)
            saved = _nearest(inventories[rank], holders, _NEAR)
            server = None if saved is not None else _server(inventories, holders, rank)
            if server is not None:
                routes[rank].receives.append((transfer, server[0], server[1], item))
                routes[server[0]].sends.append((transfer, rank, server[1], item))
                transfer += 1
                continue
            if saved is None:
                saved = _nearest(inventories[rank], holders, (_BACKUP,))
            if saved is None:
                raise strata.NotFoundError(
                    f"step {step}: item '{item}' of saved rank(s) {list(holders)} is in no tier "
                    f"rank {rank} can read: it reads the steps of saved ranks "
                    f"{sorted(inventories[rank])}, the job those of "
                    f"{sorted({q for inv in inventories for q in inv})}")
            routes[rank].reads[item] = saved
    return routes


class StrataStorageReader(StorageReader):
    """A DCP StorageReader for checkpoints StrataStorageWriter saved.

    `directory` as for the writer. With `agent_job` the agent chooses the
    step (the handshake, once per process and directory, shared with a
    StrataStorageWriter of this process): the newest step complete on every
    node, from this node's RAM, a peer or the backup. When the agent says
    "start fresh" and `backup` (a file:// URL) holds a committed backup of
    the job saved at another node count, that backup is loaded, resharded.
    `job` names the job whose backups (and, when it is the agent job's, whose
    copies in the agent's store) are read; default: the agent job's.
    Without an agent: the newest step every rank of `process_group` has in
    its own directory (or checkpoint_id=<step>), else the newest backup of
    `job` in `backup`.

    `step` tells which step dcp.load will load (None: nothing to restore);
    after the load, `sources` maps each saved rank whose items this rank
    read to where it read them: "anchor" (the step it read the Metadata
    from: its own, or what the agent restored for its node), "dir" (another
    rank's directory, local mode), "store" (this node's agent), "backup",
    or "rank N" (sent by rank N of the process group).
    Items the rank's own step lacks (another world size or layout) come from
    the nearest tier that has them; see the module docstring. Ranks exchange
    items over `process_group` (the group given to dcp.load; it needs a CPU
    backend, gloo). Choosing the step without an agent is collective: every
    rank asks for `step` or calls dcp.load. One reader serves one load.

    Nothing a step holds runs code on the load: the Metadata is JSON, and
    each bytes item (DCP's torch.save of a non-tensor value) must pass
    torch's weights_only unpickler before DCP's planner loads it, else the
    load fails with DataLossError naming it. `allow_pickle=True` skips that
    check, for a trusted checkpoint whose state holds other objects.
    """

    def __init__(self, directory: str, *, agent_job: Optional[strata.AgentJob] = None,
                 job: Optional[str] = None, backup: Optional[str] = None,
                 process_group: Optional[dist.ProcessGroup] = None,
                 allow_pickle: bool = False) -> None:
        self._template = os.fspath(directory)
        self._allow_pickle = allow_pickle
        self._agent_job = agent_job
        self._job = job if job is not None else (agent_job.job if agent_job else None)
        self._backup = _backup_root(backup)
        self._group = process_group
        self._asked: Optional[int] = None  # checkpoint_id
        self._anchor: Any = _UNCHOSEN     # None: nothing to restore
        self._restored: Dict[int, strata.Restored] = {}
        self._info: Dict[str, Any] = {}
        self._checked: Dict[_Copy, Dict[str, Any]] = {}  # copies whose metadata decoded
        self._copies: Dict[int, _Copy] = {}
        self.sources: Dict[int, str] = {}
        self.direct = 0  # read items the last load had the stager copy as they verified

    @property
    def step(self) -> Optional[int]:
        """The step dcp.load will load; None when there is nothing to restore."""
        anchor = self._choose()
        return None if anchor is None else anchor.step

    def reset(self, checkpoint_id: Any = None) -> None:
        if checkpoint_id is not None and self._agent_job is not None:
            raise strata.InvalidArgumentError(
                f"job {self._agent_job.job}: the agent chooses the step to restore; "
                f"checkpoint_id {checkpoint_id!r} cannot be asked for")
        self._asked = None if checkpoint_id is None else _parse_step(checkpoint_id)
        self._anchor, self._restored, self._copies, self._checked = _UNCHOSEN, {}, {}, {}

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        return StrataStorageWriter.validate_checkpoint_id(checkpoint_id)

    def read_metadata(self) -> Metadata:
        anchor = self._choose()
        if anchor is None:
            raise strata.NotFoundError(
                f"nothing to restore for {self._directory()}: no step is complete for every "
                "rank" + (f" and no backup of job {self._job} in {self._backup}"
                          if self._backup else ""))
        info = self._checked.get(anchor) or _read_info(anchor)
        self._info = info
        self._restored = {}
        self._copies = {info["rank"]: anchor}
        return info["metadata"]

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool,
                              *args: Any, **kwargs: Any) -> None:
        self._locations = metadata.storage_data
        self._chunks = {}  # (fqn, chunk offsets) -> (dtype, chunk sizes)
        for fqn, md in metadata.state_dict_metadata.items():
            for chunk in getattr(md, "chunks", ()):
                self._chunks[(fqn, tuple(chunk.offsets))] = (md.properties.dtype, chunk.sizes)

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        """Adds this rank's inventory: the saved ranks whose step it can read
        here, and from which tier."""
        step, saved_world = self._info["step"], self._info["world_size"]
        anchor_rank, anchor = next(iter(self._copies.items()))
        if self._backup is not None and self._job is not None:
            commits = [c for c in _backups(self._backup, self._job)
                       if c["step"] == step and c["nodes"] == saved_world]
            self._copies.update(_backup_copies(commits[-1]) if commits else {})
        if self._agent_job is not None:
            if self._job == self._agent_job.job:  # another job's copies are being dropped
                self._copies.update(_store_copies(self._directory(), self._job, step))
        else:
            self._copies.update(_dir_copies(self._template, step))
        self._copies[anchor_rank] = anchor
        inventory = {q: c.tier for q, c in self._copies.items()}
        inventory[anchor_rank] = _ANCHOR
        return dataclasses.replace(plan, storage_data=inventory)

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        inventories = [p.storage_data for p in plans]
        routes = _route(inventories, plans, self._locations, self._info["step"])
        return [dataclasses.replace(p, storage_data=r) for p, r in zip(plans, routes)]

    def read_data(self, plan: LoadPlan, planner: Any) -> Future:
        """Reads each saved rank's step this rank needs once: the items that
        fill a whole destination tensor of the same dtype are copied into it
        by the stager as soon as they verify (host->device for GPU tensors,
        while the rest is still read); the others -- parts of an item
        (resharding), bytes, another dtype -- are loaded from host memory."""
        route: _Route = plan.storage_data
        targets: Dict[int, Any] = {}  # id(read_item) -> its destination, resolved once
        direct = self._direct(plan, route, planner, targets)
        error = None
        try:
            for saved in sorted(set(route.reads.values()) | {s for _, _, s, _ in route.sends}):
                if saved not in self._restored:
                    self._restored[saved] = self._copies[saved].read_planned(
                        [d for d, _ in direct.get(saved, [])])
        except Exception as e:  # reported after the exchange, so that no peer waits forever
            error = e
        received = self._exchange(route, error)
        self.sources = {q: self._tier(q) for q in route.reads.values()}
        self.sources.update({q: f"rank {p}" for _, p, q, _ in route.receives})
        copied = {id(r) for pairs in direct.values() for _, items in pairs for r in items}
        self.direct = len(copied)
        for read_item in plan.items:
            target = targets.get(id(read_item))
            if id(read_item) in copied:
                planner.commit_tensor(read_item, target)
                continue
            item = self._locations[read_item.storage_index][0]
            data = received[item] if item in received else \
                self._restored[route.reads[item]].items[item]
            self._load(read_item, data, planner, target)
        self._restored, self._anchor = {}, _UNCHOSEN  # free the steps read
        future: Future = Future()
        future.set_result(None)
        return future

    def _direct(self, plan: LoadPlan, route: _Route, planner: Any, targets: Dict[int, Any]):
        """Saved rank -> [(destination, [read items it fills])] for the items
        the stager can copy straight into their destination: read from a
        copy on this node, whole, into a contiguous CPU or CUDA tensor of the
        item's dtype and size. Resolves every tensor read item's destination
        (into `targets`)."""
        streams: Dict[int, int] = {}
        by_item: Dict[Tuple[int, str], Tuple[Tuple, List[Any]]] = {}
        for read_item in plan.items:
            if read_item.type == LoadItemType.BYTE_IO:
                continue
            target = planner.resolve_tensor(read_item).detach()
            targets[id(read_item)] = target
            item = self._locations[read_item.storage_index][0]
            saved = route.reads.get(item)
            index = read_item.storage_index
            dtype, sizes = self._chunks[(index.fqn, tuple(index.offset))]
            whole = (tuple(read_item.lengths) == tuple(sizes) and not any(read_item.storage_offsets)
                     and tuple(target.size()) == tuple(sizes) and target.dtype == dtype)
            if saved is None or not whole or not target.is_contiguous() or \
                    not (target.is_cuda or target.is_cpu) or (saved, item) in by_item:
                continue
            device = target.get_device() if target.is_cuda else -1
            if device >= 0 and device not in streams:
                streams[device] = torch.cuda.current_stream(device).cuda_stream
            destination = (item, target.data_ptr(), target.nbytes, device, streams.get(device, 0))
            by_item[(saved, item)] = (destination, [read_item])
        direct: Dict[int, List[Tuple[Tuple, List[Any]]]] = {}
        for (saved, _), pair in by_item.items():
            direct.setdefault(saved, []).append(pair)
        return direct

    def _tier(self, saved_rank: int) -> str:
        anchor = self._info["rank"]
        return _ANCHOR if saved_rank == anchor else self._copies[saved_rank].tier

    def _load(self, read_item: Any, data: numpy.ndarray, planner: Any, target: Any) -> None:
        if read_item.type == LoadItemType.BYTE_IO:
            raw = data.tobytes()
            if not self._allow_pickle:
                _check_bytes_item(raw, f"step {self._info['step']}: '{read_item.storage_index.fqn}'")
            planner.load_bytes(read_item, io.BytesIO(raw))
            return
        index = read_item.storage_index
        dtype, sizes = self._chunks[(index.fqn, tuple(index.offset))]
        source = _narrow(_from_item(data, dtype, sizes), read_item.storage_offsets,
                         read_item.lengths)
        if target.size() != source.size():
            raise strata.InvalidArgumentError(
                f"step {self._info['step']}: '{index.fqn}' at {list(read_item.dest_offsets)}: "
                f"the checkpoint has {list(source.size())}, the state dict "
                f"{list(target.size())}")
        target.copy_(source)
        planner.commit_tensor(read_item, target)

    def _exchange(self, route: _Route, error: Optional[Exception]) -> Dict[str, numpy.ndarray]:
        """Sends the items other ranks read from this one and receives those
        this one reads from others (sizes first; -1: the sender failed).
        Raises `error`, or the first failure, once every transfer is done."""
        works, failures = [], [error] if error is not None else []
        for transfer, to, saved, item in route.sends:
            payload = None
            if saved in self._restored:
                payload = torch.from_numpy(self._restored[saved].items[item].reshape(-1)
                                           .view(numpy.uint8))
            size = torch.tensor([-1 if payload is None else payload.numel()], dtype=torch.int64)
            works.append(dist.isend(size, group=self._group, group_dst=to, tag=2 * transfer))
            if payload is not None and payload.numel() > 0:
                works.append(dist.isend(payload, group=self._group, group_dst=to,
                                        tag=2 * transfer + 1))
        received = {}
        for transfer, source, _, item in route.receives:
            size = torch.empty(1, dtype=torch.int64)
            dist.recv(size, group=self._group, group_src=source, tag=2 * transfer)
            if size.item() < 0:
                failures.append(strata.UnavailableError(
                    f"step {self._info['step']}: rank {source} could not read item '{item}' "
                    "for this rank (its own error says why)"))
                continue
            payload = torch.empty(int(size.item()), dtype=torch.uint8)
            if payload.numel() > 0:
                dist.recv(payload, group=self._group, group_src=source, tag=2 * transfer + 1)
            received[item] = payload.numpy()
        for work in works:
            work.wait()
        if failures:
            raise failures[0]
        return received

    def _directory(self) -> str:
        return self._template.format(rank=_group_rank(self._group)[0])

    def _choose(self) -> Optional[_Copy]:
        """The copy this rank reads the Metadata from (the anchor); None:
        nothing to restore. Chosen once per load."""
        if self._anchor is _UNCHOSEN:
            self._anchor = self._choose_with_agent() if self._agent_job is not None \
                else self._choose_locally()
        return self._anchor

    def _choose_with_agent(self) -> Optional[_Copy]:
        os.makedirs(self._directory(), exist_ok=True)
        point = _handshake(self._directory(), self._agent_job)
        if point is not None:
            anchor = _Copy(_ANCHOR, point[0], point[1])
            if self._every_rank(bool(_readable([anchor], self._checked))):
                return anchor
            # Some rank's copy of the agents' step is refused: the newest
            # older step every rank can read in its directory, else a backup.
            older = [_Copy(_ANCHOR, point[0], s) for s in _committed_steps(point[0])
                     if s < point[1]]
            step = self._agree(_readable(older, self._checked))
            if step is not None:
                return _Copy(_ANCHOR, point[0], step)
            return self._backup_anchor(lambda c: c["step"] < point[1])
        # The agents plan with the job's backups of its node count; any other
        # backup (another node count, the `job` the reader was given) is ours.
        same_job = self._job == self._agent_job.job
        return self._backup_anchor(lambda c: not same_job or c["nodes"] != self._agent_job.nodes)

    def _choose_locally(self) -> Optional[_Copy]:
        own = self._directory()
        steps = _committed_steps(own)
        step = self._asked if self._asked is not None else \
            self._agree(_readable([_Copy(_DIR, own, s) for s in steps], self._checked))
        if step is None:
            return self._backup_anchor(lambda c: True)
        if step in steps:
            return _Copy(_DIR, own, step)
        copies = _dir_copies(self._template, step)
        if copies:
            return copies[min(copies)]
        return self._backup_anchor(lambda c: c["step"] == step)

    def _every_rank(self, ok: bool) -> bool:
        """Whether `ok` holds on every rank of the group (collective)."""
        rank, world = _group_rank(self._group)
        if world == 1:
            return ok
        every = [ok] * world
        dist.all_gather_object(every, ok, group=self._group)
        return all(every)

    def _agree(self, steps: List[int]) -> Optional[int]:
        """The newest step in the own directory of every rank that has any."""
        rank, world = _group_rank(self._group)
        every = [steps] * world
        if world > 1:
            dist.all_gather_object(every, steps, group=self._group)
        common = set.intersection(*[set(s) for s in every if s] or [set()])
        return max(common) if common else None

    def _backup_anchor(self, wanted: Any) -> Optional[_Copy]:
        if self._backup is None or self._job is None:
            return None
        commits = [c for c in _backups(self._backup, self._job) if wanted(c)]
        if not commits:
            return None
        parts = _backup_copies(commits[-1])
        rank = _group_rank(self._group)[0]
        return parts.get(rank, parts[0])
