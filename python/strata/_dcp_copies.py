"""Where the copies of a strata.dcp rank's step are, and reading their
metadata item safely: this node's agent store, other ranks' directories,
file:// backups (strata/dcp.py's reader uses them; its docstring is the
design); and the agent handshake, once per process and directory. The
layouts are the C++ code's, asked through the binding (python/src/
layouts.cc): which directories are committed steps, where the agent's
store keeps a step's copies, which backups are committed and where their
parts are."""

import io
import os
import tempfile
import threading
import warnings
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.distributed as dist

import strata
from strata import dcp_metadata
from strata._strata import agent_store_copies, backup_commits, committed_steps

# The item of every rank's step that holds DCP's Metadata with the rank and
# world size that saved it: JSON (strata/dcp_metadata.py), never a pickle.
METADATA_ITEM = "__strata_dcp__"

# Tiers a copy of a rank's step can be read from, nearest first.
_ANCHOR, _DIR, _STORE, _BACKUP = "anchor", "dir", "store", "backup"
_NEAR = (_ANCHOR, _DIR, _STORE)


def _check_bytes_item(raw: bytes, what: str) -> None:
    """Refuses a bytes item (DCP's torch.save of a non-tensor value) unless
    torch's weights_only unpickler accepts it: that one builds only plain
    values, containers and tensors and calls nothing else the bytes name.
    DCP's planner then loads it (torch.load, weights_only=False), which the
    check has shown calls only those same constructors."""
    try:
        torch.load(io.BytesIO(raw), weights_only=True)
    except Exception as e:  # pickle.UnpicklingError, or what the bytes made it raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise strata.DataLossError(
            f"{what}: the bytes item is refused: torch's weights_only unpickler does not "
            f"accept it ({first}); StrataStorageReader(allow_pickle=True) loads it from a "
            "trusted checkpoint") from None


# ---- where copies of a rank's step are ------------------------------------------

class _Copy(NamedTuple):
    """A copy of one rank's step: `steps_dir/<step>` (a backup part is made
    to look like one through a symbolic link)."""
    tier: str
    steps_dir: str
    step: int

    def read(self) -> strata.Restored:
        return self._with_dir(lambda d: strata.restore_step(d, self.step))

    def read_items(self, names: List[str]) -> strata.Restored:
        """Only these items (verified), not the rest of the step."""
        return self._with_dir(lambda d: strata.restore_step_items(d, self.step, names))

    def read_planned(self, destinations: List[Tuple[str, int, int, int, int]]) -> strata.Restored:
        """The whole step, each item of `destinations` ((item, address, bytes,
        CUDA device or -1, stream)) copied there by the stager as soon as it
        verifies; the rest stays in the host memory returned."""
        return self._with_dir(lambda d: strata.restore_step_planned(
            d, self.step, METADATA_ITEM, lambda step, key: destinations))

    def _with_dir(self, read):
        if self.tier != _BACKUP:
            return read(self.steps_dir)
        with tempfile.TemporaryDirectory(prefix="strata-dcp-") as tmp:
            os.symlink(self.steps_dir, os.path.join(tmp, str(self.step)))
            return read(tmp)


def _read_info(copy: _Copy) -> Dict[str, Any]:
    """The copy's decoded metadata item (dcp_metadata.decode). Raises
    DataLossError for a step whose item does not verify or is refused (a
    pickle, anything but strata.dcp's JSON: nothing of it runs), and
    InvalidArgumentError for a step StrataStorageWriter did not save."""
    where = f"step {copy.step} in {copy.steps_dir}"
    try:
        restored = copy.read_items([METADATA_ITEM])
    except strata.NotFoundError:
        raise strata.InvalidArgumentError(
            f"{where} was not saved by StrataStorageWriter (it has no {METADATA_ITEM} item)") \
            from None
    info = dcp_metadata.decode(restored.items[METADATA_ITEM].tobytes(), where)
    if info["step"] != copy.step:
        raise strata.DataLossError(f"{where}: its DCP metadata item is step {info['step']}'s")
    return info


def _readable(copies: List[_Copy], checked: Dict[_Copy, Dict[str, Any]],
              newest_only: bool = False) -> List[int]:
    """The steps of `copies` (oldest first) whose metadata item decodes
    (kept in `checked`); a refused one is skipped with a RuntimeWarning
    saying why, as a corrupt step is. `newest_only`: the newest such step
    alone, read newest first (the older ones are not read)."""
    steps = []
    for c in reversed(copies) if newest_only else copies:
        try:
            checked[c] = _read_info(c)
            steps.append(c.step)
        except strata.DataLossError as e:
            warnings.warn(f"{e}; an older step is used", RuntimeWarning, stacklevel=3)
            continue
        if newest_only:
            break
    return steps


def _committed_steps(steps_dir: str) -> List[int]:
    """The committed steps of a Strata checkpoint directory, oldest first, by
    libstrata's rule (ListSteps: a step's name and its strata.manifest);
    none when the directory cannot be listed."""
    try:
        return committed_steps(steps_dir)
    except strata.Error:
        return []


def _store_copies(directory: str, job: str, step: int) -> Dict[int, _Copy]:
    """The copies of `step` this node's agent holds, by rank: its own and
    its peers' replicas, where the agent's store keeps them
    (agent/store/store_layout.h, asked through the binding)."""
    return {rank: _Copy(_STORE, steps_dir, step)
            for rank, steps_dir in agent_store_copies(directory, job, step).items()
            if step in _committed_steps(steps_dir)}


def _dir_copies(template: str, step: int) -> Dict[int, _Copy]:
    """Local mode: step `step` in the directories of ranks 0, 1, ... that
    exist here (a directory template with "{rank}")."""
    copies, rank = {}, 0
    while "{rank}" in template and os.path.isdir(template.format(rank=rank)):
        if step in _committed_steps(template.format(rank=rank)):
            copies[rank] = _Copy(_DIR, template.format(rank=rank), step)
        rank += 1
    return copies


def _backup_root(url: Optional[str]) -> Optional[str]:
    if url is None:
        return None
    if not url.startswith("file://"):
        raise strata.InvalidArgumentError(
            f"backup {url!r}: the DCP reader reads file:// backups only (s3:// is restored "
            "by the agents, at the job's node count)")
    return url[len("file://"):]


def _backups(root: str, job: str) -> List[Dict[str, Any]]:
    """The committed backups of `job` under `root`, oldest step first, as the
    backup layout reads them (backup/layout.h, through the binding): dicts
    of id, step, nodes and parts (node rank -> its part's directory)."""
    return sorted(backup_commits(root, job), key=lambda c: (c["step"], c["id"]))


def _backup_copies(commit: Dict[str, Any]) -> Dict[int, _Copy]:
    """Node rank -> the part it restores from (the commit's sources)."""
    return {rank: _Copy(_BACKUP, part, commit["step"]) for rank, part in commit["parts"].items()}


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



def _group_rank(group: Optional[dist.ProcessGroup]) -> Tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1
