"""Where each rank of a DCP load reads each item: a copy of the saved rank's
step on its node, another rank's over the process group, else the backup
(the coordinator's part of StrataStorageReader's global plan)."""

import dataclasses
from typing import Dict, List, Tuple

from torch.distributed.checkpoint.metadata import MetadataIndex
from torch.distributed.checkpoint.planner import LoadPlan

import strata
from strata._dcp_copies import _BACKUP, _NEAR


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
