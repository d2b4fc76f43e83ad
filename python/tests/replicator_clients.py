"""Test clients of the replicator file protocol that behave as the real ones.

Each class does, step by step and with the same file-system calls, what the
real client's code does (read from their sources; the code here is ours):

* OrbaxClient: Orbax's multi-tier checkpointing,
  ``initialize_multi_tier_checkpointing`` (``use_mtc_process_ids=True``):
  waits for ``jax-init-info.txt``, writes ``replicator.yaml.tmp`` and renames
  it, waits for the yaml to go, takes the newest ``*.restore`` marker by a
  strict pattern and renames it to ``<step>`` (a step-0 marker too, when it
  is a symlink: a regular file with step 0 means a fresh start); saves as a
  CheckpointManager does (a temporary directory renamed to ``<step>``),
  with ``_BACKUP_REQUESTED`` in it when asked for a backup (0.12.10). The real package
  (``orbax-checkpoint`` with ``jax`` on CPU, ``ReplicatorCheckpointManager``)
  runs the same protocol against real agents in ``test_orbax.py``; this
  re-creation stays for what that test cannot do quickly (polling every
  0.2 s, the directory watch, a client without JAX), and its step contents
  (``state/data``) are not Orbax's layout.
* NemoClient: the NeMo resiliency plugin, ``init_high_scale_ckpt`` and
  ``block_and_proces_restore_dir`` (``high_scale_ckpt_utils.py``) and the
  save path of ``callbacks/model_checkpoint.py``: the yaml written in place
  with both ``peers-per-node`` and ``peer-ranks``, markers found by a pathlib
  glob (dot-files included), ``step=S-unfinished`` markers, ``step=G``
  renamed to ``G-1``.
* LegacyMaxTextClient: MaxText's own copy before it moved to Orbax
  (``max_utils.py``): ``os.listdir`` + ``endswith(".restore")``, the step
  taken by ``rsplit``, a step-0 marker left in place, timeouts only logged.

The real clients poll once a second; these poll every ``poll`` seconds
(default 0.2) so that the suite stays short. Every name a client creates in
the directory is recorded in ``created`` so that a test can tell the
client's names from the agent's.
"""

import logging
import os
import re
import time
from pathlib import Path

import yaml  # PyYAML, as the NeMo plugin uses it

log = logging.getLogger("replicator_clients")

REPLICATOR_FILE = "replicator.yaml"
TEMP_REPLICATOR_FILE = REPLICATOR_FILE + ".tmp"
ERRORS_FILE = "replicator.errors"
FAILED_FILE = "replicator.failed"
PRERESTORE_FILE = "replicator.prerestore"
JAX_INIT_INFO_FILE = "jax-init-info.txt"
BACKUP_REQUESTED_FILE = "_BACKUP_REQUESTED"


def step_bytes(job: str, node: int, step: int, size: int = 1 << 20) -> bytes:
    """The deterministic contents a node saves for a step (1 MiB by default)."""
    seed = f"{job}/{node}/{step}/".encode()
    block = (seed * (4096 // len(seed) + 1))[:4096]
    return (block * (size // 4096 + 1))[:size]


class _Client:
    def __init__(self, local_dir, poll: float = 0.2):
        self.dir = Path(local_dir)
        self.poll = poll
        self.created = set()  # names this client put into the directory

    def _note(self, name) -> str:
        self.created.add(str(name))
        return str(name)

    def _wait_gone(self, name: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not (self.dir / name).exists():
                return True
            time.sleep(self.poll)
        return False

    def _read_jax_init_info(self, timeout: float):
        """Orbax's _retrieve_jax_init_info: read once it exists, split on
        newlines, the first two values; no stripping."""
        path = self.dir / JAX_INIT_INFO_FILE
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if path.exists():
                return path.read_text().split("\n")[:2]
            time.sleep(self.poll)
        return None

    def _write_orbax_yaml(self, lines, rename=os.replace) -> None:
        """_create_replicator_file: the lines joined by newlines, stripped, no
        trailing newline, written to the .tmp file and renamed."""
        text = "\n".join(line.strip() for line in lines)
        tmp = self.dir / self._note(TEMP_REPLICATOR_FILE)
        tmp.write_text(text)
        self._note(REPLICATOR_FILE)
        rename(tmp, self.dir / REPLICATOR_FILE)

    def _save_orbax_style(self, step: int, data: bytes, backup: bool = False) -> None:
        """A CheckpointManager save: a temporary directory, renamed to <step>.
        With `backup` (Orbax 0.12.10's save(..., backup=True)), an empty
        _BACKUP_REQUESTED file in the step's directory asks the replicator
        for a backup of the step; it is written before the directory is
        committed, since the replicator may take the step the moment it is."""
        tmp = self.dir / self._note(f"{step}.orbax-checkpoint-tmp-{time.time_ns()}")
        (tmp / "state").mkdir(parents=True)
        (tmp / "state" / "data").write_bytes(data)
        (tmp / "commit_success.txt").write_text("Checkpoint commit was successful.")
        if backup:
            (tmp / BACKUP_REQUESTED_FILE).write_bytes(b"")
        os.rename(tmp, self.dir / self._note(str(step)))


def orbax_peer_ranks(node_rank: int, nodes: int, num_slices: int):
    """The same position in every other slice (initialization.py)."""
    nodes_per_slice = nodes // num_slices
    mine = node_rank % nodes_per_slice
    return [i * nodes_per_slice + mine for i in range(num_slices)
            if i * nodes_per_slice + mine != node_rank]


class OrbaxClient(_Client):
    RESTORE_RE = re.compile(r"^.+-s(?P<step>\d+)-n\d+-w\d+\.restore$")

    def __init__(self, local_dir, run_name: str, nodes: int, num_slices: int,
                 data_parallelism=None, backup_interval_minutes=None,
                 backup_interval_steps=None, poll: float = 0.2):
        super().__init__(local_dir, poll)
        self.run_name = run_name
        self.nodes = nodes
        self.num_slices = num_slices  # peers: the same position in every other slice
        # assume-data-parallelism; Orbax defaults it to the number of slices
        self.data_parallelism = data_parallelism if data_parallelism else num_slices
        self.backup_interval_minutes = backup_interval_minutes
        self.backup_interval_steps = backup_interval_steps
        if backup_interval_minutes is None and backup_interval_steps is None:
            self.backup_interval_minutes = 30
        self.node_rank = None
        self.coordinator_address = None

    def check_for_replicator_errors(self) -> None:
        """_check_for_replicator_errors: read, log and delete both files;
        a non-empty replicator.failed raises."""
        texts = {}
        for name in (ERRORS_FILE, FAILED_FILE):
            path = self.dir / name
            if not path.exists():
                continue
            try:
                texts[name] = path.read_text()
            except (OSError, ValueError) as e:
                log.error("cannot read %s: %s", path, e)
                texts[name] = None
            try:
                path.unlink()
            except OSError as e:
                log.error("cannot delete %s: %s", path, e)
        if texts.get(ERRORS_FILE):
            log.error("Replicator errors: %s", texts[ERRORS_FILE])
        if texts.get(FAILED_FILE):
            raise RuntimeError(f"Replicator fatal errors: {texts[FAILED_FILE]}")

    def _wait_for_replicator_file_to_disappear(self, timeout: float, check_for_errors=True):
        if not self._wait_gone(REPLICATOR_FILE, timeout):
            raise TimeoutError(f"Timeout reached ({timeout} seconds) while waiting for "
                               f"{REPLICATOR_FILE} to disappear.")
        if check_for_errors:
            self.check_for_replicator_errors()

    def initialize(self, timeout: float = 300, jax_timeout: float = 900):
        """Returns the restored step, or None for a fresh start."""
        values = self._read_jax_init_info(jax_timeout)
        if values is None:
            raise TimeoutError(f"Unable to locate {JAX_INIT_INFO_FILE} after {jax_timeout} "
                               "seconds,")
        if len(values) < 2:
            raise ValueError("JAX init info file doesn't have required process id and "
                             "coordinator address")
        process_id, coordinator_address = values
        if not process_id or not coordinator_address:
            raise ValueError(f"invalid JAX init info: {values!r}")
        self.node_rank = int(process_id)  # jax.distributed.initialize(process_id=...)
        self.coordinator_address = coordinator_address
        self._wait_for_replicator_file_to_disappear(timeout, check_for_errors=False)
        peers = orbax_peer_ranks(self.node_rank, self.nodes, self.num_slices)
        interval = (f"backup-interval-minutes: {self.backup_interval_minutes}"
                    if self.backup_interval_minutes is not None
                    else f"backup-interval-steps: {self.backup_interval_steps}")
        self._write_orbax_yaml([
            f"job-name: {self.run_name}",
            "  framework: orbax",
            f"  assume-data-parallelism: {self.data_parallelism}",
            f"  node-rank: {self.node_rank}",
            f"  nodes: {self.nodes}",
            f"  peer-ranks: {peers}",
            f"  {interval}"])
        self._wait_for_replicator_file_to_disappear(timeout)
        return self._block_and_process_restore_dir(timeout)

    def _block_and_process_restore_dir(self, timeout: float):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            markers = sorted(self.dir.glob("*.restore"), key=lambda p: p.name)
            self.check_for_replicator_errors()
            restore, no_checkpoint = [], []
            for path in markers:
                m = self.RESTORE_RE.fullmatch(path.name)
                if m is None:
                    raise ValueError("Unexpected restore artifact name. Expected "
                                     "{job_name}-s{step}-n{node_rank}-w{worker_rank}.restore, "
                                     f"got {path.name}")
                step = m.group("step")
                if step == "0" and path.is_file():
                    no_checkpoint.append(path)
                else:
                    restore.append((int(step), path))
            if restore:
                step, path = max(restore)
                os.replace(path, self.dir / self._note(str(step)))
                for _, other in restore:
                    if other != path:
                        other.unlink(missing_ok=True)
                for other in no_checkpoint:
                    other.unlink(missing_ok=True)
                return step
            if no_checkpoint:
                for path in no_checkpoint:
                    path.unlink(missing_ok=True)
                return None
            time.sleep(self.poll)
        raise TimeoutError(f"{timeout} seconds have passed but no .restore file was found.")

    def save(self, step: int, data: bytes, backup: bool = False) -> None:
        self._save_orbax_style(step, data, backup)

    def read(self, step: int) -> bytes:
        return (self.dir / str(step) / "state" / "data").read_bytes()


class NemoClient(_Client):
    def __init__(self, local_dir, job_name: str, node_rank: int, nodes: int,
                 peer_ranks=None, peers_per_node: int = 1, backup_interval_minutes: int = 30,
                 poll: float = 0.2):
        super().__init__(local_dir, poll)
        self.job_name = job_name
        self.node_rank = node_rank
        self.nodes = nodes
        self.peer_ranks = peer_ranks
        self.peers_per_node = peers_per_node
        self.backup_interval_minutes = backup_interval_minutes

    def config(self) -> dict:
        """The plugin's mapping, in its order."""
        config = {"job-name": self.job_name, "framework": "pytorch.distributed",
                  "node-rank": self.node_rank, "nodes": self.nodes,
                  "peers-per-node": self.peers_per_node,
                  "backup-interval-minutes": self.backup_interval_minutes}
        if self.peer_ranks is not None:
            config["peer-ranks"] = list(self.peer_ranks)
        return config

    def handle_replicator_fail_situation(self) -> None:
        errors = self.dir / ERRORS_FILE
        failed = self.dir / FAILED_FILE
        if errors.exists():
            log.error("Repliactor error: %s", errors.read_text())
            errors.unlink()
        if failed.exists():
            message = failed.read_text()
            log.critical("Repliactor failed: %s", message)
            failed.unlink()
            raise ValueError(f"Replictor failed with error {message}")

    def init_high_scale_ckpt(self, timeout: float = 300) -> None:
        if not self._wait_gone(REPLICATOR_FILE, timeout):
            raise TimeoutError("replicator.yaml did not disappear")
        with open(self.dir / self._note(REPLICATOR_FILE), "w") as f:  # in place
            yaml.dump(self.config(), f, default_flow_style=False, sort_keys=False)

    def block_and_proces_restore_dir(self, timeout: float = 300):
        """Returns the step of the directory it will load, or None."""
        if not self._wait_gone(REPLICATOR_FILE, timeout):
            raise TimeoutError("replicator.yaml did not disappear")
        self.handle_replicator_fail_situation()
        self._process_replicator_prerestore(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for f in self.dir.glob("*.restore"):  # pathlib: dot-files match too
                m = re.search(r"-s(\d+)-n\d+-w\d+", f.name)
                step = int(m.group(1)) if m else 0
                if step == 0:
                    log.info("Found a restore directory at step 0, skipping renaming.")
                    return self.find_latest_checkpoint_step()
                os.rename(self.dir / f.name, self.dir / self._note(f"step={step}"))
                return self.find_latest_checkpoint_step()
            time.sleep(self.poll)
        raise TimeoutError(f"{timeout} seconds have passed but no .restore file was found.")

    def _process_replicator_prerestore(self, timeout: float):
        path = self.dir / PRERESTORE_FILE
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if path.exists():
                try:
                    with open(path) as f:
                        info = yaml.safe_load(f)
                except yaml.YAMLError as e:
                    log.error("bad %s: %s", path, e)
                    return 0
                return int(info.get("restore-step", 0))  # an empty file: None.get raises
            time.sleep(self.poll)
        raise ValueError("Replictor failed to produce prerestore file.")

    def find_latest_checkpoint_step(self):
        """_ckpt_utils.find_latest_checkpoint_path over step=N directories."""
        best = None
        for path in self.dir.glob("*"):
            if not path.is_dir():
                continue
            if (self.dir / f"{path.name}-unfinished").exists():
                continue
            if re.match(r"^step=\d+$", path.name):
                step = int(re.search(r"step=(-?\d+)", str(path)).group(1))
                best = step if best is None else max(best, step)
        return best

    def save(self, global_step: int, data: bytes) -> int:
        """An async save at global step G: returns the step the replicator
        sees (G - 1)."""
        marker = self.dir / self._note(f"step={global_step}-unfinished")
        marker.touch()
        ckpt = self.dir / self._note(f"step={global_step}")
        ckpt.mkdir()
        (ckpt / "model_weights").write_bytes(data)
        marker.unlink()
        self.handle_replicator_fail_situation()
        os.rename(ckpt, self.dir / self._note(str(global_step - 1)))
        return global_step - 1

    def read(self, step: int) -> bytes:
        return (self.dir / f"step={step}" / "model_weights").read_bytes()


class LegacyMaxTextClient(_Client):
    def __init__(self, local_dir, run_name: str, nodes: int, num_slices: int,
                 backup_interval_minutes: int = 0, poll: float = 0.2):
        super().__init__(local_dir, poll)
        self.run_name = run_name
        self.nodes = nodes
        self.num_slices = num_slices
        self.backup_interval_minutes = backup_interval_minutes  # the config's default is 0
        self.node_rank = None

    def initialize(self, timeout: float = 300, jax_timeout: float = 900):
        """Returns the step it renamed a marker to, 0 for a step-0 marker,
        "skipped" when jax-init-info.txt never came (MaxText then writes no
        yaml at all), None when no marker came in time (only logged)."""
        values = self._read_jax_init_info(jax_timeout)
        if values is None:
            log.info("Unable to locate jax-init-info.txt, returning empty process id and "
                     "coordinator address.")
            return "skipped"
        process_id, coordinator_address = values
        if process_id == "" or coordinator_address == "":
            return "skipped"
        self.node_rank = int(process_id)
        if not self._wait_gone(REPLICATOR_FILE, timeout):
            log.info("There is existing replicator.yaml which did not disappear in time.")
        peers = orbax_peer_ranks(self.node_rank, self.nodes, self.num_slices)
        self._write_orbax_yaml([
            f"job-name: {self.run_name}",
            "      framework: orbax",
            f"      assume-data-parallelism: {self.num_slices}",
            f"      node-rank: {self.node_rank}",
            f"      nodes: {self.nodes}",
            f"      peer-ranks: {peers}",
            f"      backup-interval-minutes: {self.backup_interval_minutes}"], rename=os.rename)
        if not self._wait_gone(REPLICATOR_FILE, timeout):
            log.info("The newly created replicator.yaml was not deleted in time.")
        return self._block_and_proces_restore_dir(timeout)

    def _block_and_proces_restore_dir(self, timeout: float):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for f in os.listdir(self.dir):
                if f.endswith(".restore"):
                    step = f.rsplit("-", 3)[1][1:]
                    if step != "0":
                        os.rename(self.dir / f, self.dir / self._note(step))
                    else:
                        log.info("Found a restore directory at step 0, skipping renaming.")
                    return int(step)
            time.sleep(self.poll)
        log.info("%s seconds have passed but no .restore file was found.", timeout)
        return None

    def replicator_error_handler(self) -> None:
        """Before every save: both files read, logged and deleted; a
        replicator.failed that exists at all is fatal."""
        fatal = False
        for name in (ERRORS_FILE, FAILED_FILE):
            path = self.dir / name
            if path.exists():
                try:
                    log.error("%s: %s", name, path.read_text())
                except OSError:
                    pass
                try:
                    path.unlink()
                except OSError:
                    pass
                fatal |= name == FAILED_FILE
        if fatal:
            raise ValueError("Replicator fatal error found in replicator.failed file.")

    def save(self, step: int, data: bytes) -> None:
        self.replicator_error_handler()
        self._save_orbax_style(step, data)

    def read(self, step: int) -> bytes:
        return (self.dir / str(step) / "state" / "data").read_bytes()
