"""StrataStorageReader: DCP's StorageReader over Strata's tiers. Chooses the
step (the agent's, else the newest every rank has, else a backup), reads
each saved rank's step from the nearest tier (_dcp_planner.py routes it)
and has the stager copy whole items into their tensors as they verify."""

import dataclasses
import io
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan
from torch.distributed.checkpoint.storage import StorageReader
from torch.futures import Future

import strata
from strata._dcp_copies import (_ANCHOR, _DIR, _backup_copies, _backup_root, _backups,
                                _check_bytes_item, _committed_steps, _Copy, _dir_copies,
                                _group_rank, _handshake, _read_info, _readable, _store_copies)
from strata._dcp_items import _from_item, _narrow, _parse_step
from strata._dcp_planner import _Route, _route
from strata._dcp_writer import StrataStorageWriter
from strata._gc import gc_paused

_UNCHOSEN = object()  # the reader has not chosen its step yet


def _common(step_lists: List[List[int]], every_rank: bool) -> List[int]:
    """The steps in every list (newest first). Without `every_rank` an empty
    list is left out: a rank with no steps of its own reads another rank's
    directory (local mode), so it stands in no one's way."""
    lists = [set(s) for s in step_lists if s or every_rank]
    return sorted(set.intersection(*lists) if lists else set(), reverse=True)


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

    @gc_paused()
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

    @gc_paused()
    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool,
                              *args: Any, **kwargs: Any) -> None:
        self._locations = metadata.storage_data
        self._chunks = {}  # (fqn, chunk offsets) -> (dtype, chunk sizes)
        for fqn, md in metadata.state_dict_metadata.items():
            for chunk in getattr(md, "chunks", ()):
                self._chunks[(fqn, tuple(chunk.offsets))] = (md.properties.dtype, chunk.sizes)

    @gc_paused()
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

    @gc_paused()
    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        inventories = [p.storage_data for p in plans]
        routes = _route(inventories, plans, self._locations, self._info["step"])
        return [dataclasses.replace(p, storage_data=r) for p, r in zip(plans, routes)]

    @gc_paused()
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
            # Only the anchor's Metadata is used: the others' are freed now,
            # not held (and walked by the collector) through the load.
            self._checked = {c: i for c, i in self._checked.items() if c == self._anchor}
        return self._anchor

    def _choose_with_agent(self) -> Optional[_Copy]:
        os.makedirs(self._directory(), exist_ok=True)
        point = _handshake(self._directory(), self._agent_job)
        if point is not None:
            anchor = _Copy(_ANCHOR, point[0], point[1])
            if self._readable_everywhere(anchor, point[1]):
                return anchor
            # Some rank's copy of the agents' step is refused: the newest
            # older step every rank can read in its directory, else a backup.
            # Each rank reads its Metadata from its own store, so a rank
            # that holds no older step (a node restored with the newest
            # only) leaves no older step to agree on.
            older = [_Copy(_ANCHOR, point[0], s) for s in _committed_steps(point[0])
                     if s < point[1]]
            step = self._newest_readable(older, every_rank=True)
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
            self._newest_readable([_Copy(_DIR, own, s) for s in steps])
        if step is None:
            return self._backup_anchor(lambda c: True)
        if step in steps:
            return _Copy(_DIR, own, step)
        copies = _dir_copies(self._template, step)
        if copies:
            return copies[min(copies)]
        return self._backup_anchor(lambda c: c["step"] == step)

    def _readable_everywhere(self, copy: Optional[_Copy], step: int) -> bool:
        """Whether the metadata of `copy` (this rank's copy of `step`; None:
        it has none, which stands in no one's way) decodes, on every rank of
        the group (collective). A rank that cannot read its copy for another
        reason (a step StrataStorageWriter did not save, an I/O error) fails
        every rank at once: itself with its error, the others saying which
        rank and why, rather than leaving them waiting for it."""
        error: Optional[Exception] = None
        try:
            ok = copy is None or bool(_readable([copy], self._checked))
        except Exception as e:  # noqa: BLE001 - raised once every rank has voted
            error, ok = e, False
        vote = (ok, None if error is None else f"{type(error).__name__}: {error}")
        votes = [vote] * _group_rank(self._group)[1]
        if len(votes) > 1:
            dist.all_gather_object(votes, vote, group=self._group)
        if error is not None:
            raise error
        failed = [(rank, why) for rank, (_, why) in enumerate(votes) if why]
        if failed:
            raise strata.UnavailableError(
                f"step {step}: rank {failed[0][0]} could not read its copy: {failed[0][1]}")
        return all(ok for ok, _ in votes)

    def _newest_readable(self, copies: List[_Copy], every_rank: bool = False) -> Optional[int]:
        """The newest step of `copies` (this rank's, oldest first) that every
        rank with steps has (with `every_rank`: every rank) and whose
        metadata decodes on each of them (collective). Only the steps tried
        are read: alone, newest first until one decodes; in a group, the
        newest step every such rank has, then the next older one while some
        rank refuses its metadata."""
        if _group_rank(self._group)[1] == 1:
            steps = _readable(copies, self._checked, newest_only=True)
            return steps[0] if steps else None
        mine = {c.step: c for c in copies}
        for step in self._common_steps(sorted(mine), every_rank):
            if self._readable_everywhere(mine.get(step), step):
                return step
        return None

    def _common_steps(self, steps: List[int], every_rank: bool) -> List[int]:
        """The steps in the own directory of every rank that has any (with
        `every_rank`: of every rank), newest first (collective)."""
        every = [steps] * _group_rank(self._group)[1]
        dist.all_gather_object(every, steps, group=self._group)
        return _common(every, every_rank)

    def _backup_anchor(self, wanted: Any) -> Optional[_Copy]:
        if self._backup is None or self._job is None:
            return None
        commits = [c for c in _backups(self._backup, self._job) if wanted(c)]
        if not commits:
            return None
        parts = _backup_copies(commits[-1])
        rank = _group_rank(self._group)[0]
        return parts.get(rank, parts[0])
