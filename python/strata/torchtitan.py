"""TorchTitan's trainer on Strata's tiers, selected by configuration.

    from torchtitan.models.llama3.config_registry import llama3_8b
    from strata.torchtitan import StrataCheckpointManager, on_strata

    def llama3_8b_on_strata():                 # a config_registry function
        return on_strata(llama3_8b(), directory="/dev/shm/strata", job="llama3-8b")

    torchrun ... -m torchtitan.train --module my_configs --config llama3_8b_on_strata

`on_strata(config, **options)` replaces the job's `checkpoint` section with
`StrataCheckpointManager.Config`, keeping every field TorchTitan's own
section had (interval, async_mode, keep_latest_k, last_save_*, ...); the
options are that Config's Strata fields (`--checkpoint.job` etc. on the
command line too). Nothing of TorchTitan changes: its trainer builds the
manager from the section and calls load/save/close as with its own.

`StrataCheckpointManager` is TorchTitan's DCP CheckpointManager (the same
state: the flattened model, optimizers, LR schedulers, data loader and the
trainer's train state; the same save policy and modes) whose storage is
strata.dcp: each rank's part of a step is a Strata step in the node agent's
directory, which the agent keeps in RAM, replicates to its peers and backs
up. A restart loads the newest step complete on every node from the
fastest tier that holds it (the agents choose); a maintenance notice
(SIGTERM, with `on_demand`) makes the whole job save one on-demand step at
the step the agents agree on, after which every rank exits with
strata.EXIT_AFTER_ON_DEMAND (75). docs/python.md ("TorchTitan") is the
guide.
"""

import dataclasses
import signal
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torchtitan.components.checkpointer import MODEL, AsyncMode, CheckpointManager
from torchtitan.tools.logging import logger

import strata
from strata.dcp import StrataStorageReader, StrataStorageWriter

__all__ = ["StrataCheckpointManager", "on_strata"]


def _rank_and_world() -> "tuple[int, int]":
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class StrataCheckpointManager(CheckpointManager):
    """TorchTitan's CheckpointManager with its steps on Strata's tiers.

    Saves: `async_mode` "async" and "async_with_pinned_mem" both run
    dcp.async_save with StrataStorageWriter as the stager (one copy into
    page-locked staging memory, then the write in DCP's thread, overlapped
    with training); "disabled" saves synchronously. A model-only last step
    (`last_save_model_only`, TorchTitan's default) is an export, written as
    TorchTitan writes it (a DCP or Hugging Face checkpoint in
    `folder/step-N`); a full last step is a Strata step.
    Loads: the newest step complete on every node (agent mode) or in every
    rank's directory (local mode); when there is none, TorchTitan's own
    initial load (`initial_load_path`, Hugging Face weights) or a fresh start.
    `load_step` is honoured in local mode only (the agents choose the step).
    """

    @dataclass(kw_only=True, slots=True)
    class Config(CheckpointManager.Config):
        directory: str = "/dev/shm/strata"
        """The node agent's directory (a RAM disk), or in local mode each
        rank's directory: "{rank}" in it is replaced by the global rank."""

        job: str = ""
        """The agent job name; "" runs without agents (local directories,
        `directory` must then contain "{rank}")."""

        backup: Optional[str] = None
        """A file:// backup the reader may load when the agents say "start
        fresh" (a backup of the job at another node count)."""

        backup_interval_steps: int = 0
        """Ask the agents to back up every N-th step (0: the agents' own policy)."""

        on_demand: bool = True
        """SIGTERM makes the job save one on-demand step, then exit 75."""

        agent_timeout: float = 300.0
        """Seconds the handshake waits for the node agent."""

        def __post_init__(self) -> None:
            CheckpointManager.Config.__post_init__(self)
            if not self.job and "{rank}" not in self.directory:
                raise ValueError("checkpoint.directory needs '{rank}' without checkpoint.job "
                                 "(each rank saves its own Strata directory)")

    def __init__(self, config: Config, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        if not self.enable:
            return
        rank, world = _rank_and_world()
        self._config = config
        self._job = None
        if config.job:
            self._job = strata.AgentJob(config.job, node_rank=rank, nodes=world,
                                        backup_interval_steps=config.backup_interval_steps,
                                        timeout=config.agent_timeout)
        # A gloo group of the manager's own for loads (items travel over it),
        # synchronous saves and the per-step notice check: async saves plan
        # on TorchTitan's (self.pg) in DCP's thread at the same time, and two
        # threads must not issue collectives on one group.
        self._cpu_group = dist.new_group(backend="gloo") if world > 1 else None
        options = {}
        if self._job is None:
            options["max_to_keep"] = max(config.keep_latest_k, 0)
        if config.on_demand and not config.load_only:
            options["preemption_signals"] = [signal.SIGTERM]
            options["exit_after_ondemand"] = True
        self._writer = StrataStorageWriter(config.directory, agent_job=self._job, **options)
        self._to_files = False  # the model-only last step goes to TorchTitan's own writer
        if config.on_demand and not config.load_only:
            self._writer.checkpointer  # opens it now: the signal handler is installed
        logger.info(f"Strata checkpointing: {config.directory} "
                    f"({'agent job ' + config.job if config.job else 'no agent'})")

    # ---- saving ----------------------------------------------------------------------

    def dcp_save(self, state_dict: dict, checkpoint_id: str, async_mode: AsyncMode,
                 enable_garbage_collection: bool = False, to_hf: bool = False) -> Any:
        """As TorchTitan's, through StrataStorageWriter (the step is taken from
        checkpoint_id's "step-N"), except for the exports of the last step."""
        if to_hf or self._to_files:
            return super().dcp_save(state_dict, checkpoint_id, async_mode,
                                    enable_garbage_collection, to_hf)
        if async_mode == AsyncMode.DISABLED:
            dcp.save(state_dict, storage_writer=self._writer, checkpoint_id=checkpoint_id,
                     process_group=self._cpu_group)
            return None
        self.staging_future = None  # stage() returns a finished copy
        return dcp.async_save(state_dict, storage_writer=self._writer,
                              checkpoint_id=checkpoint_id, process_group=self.pg)

    def _save(self, curr_step: int, last_step: bool = False) -> bool:
        if self.load_only:
            return False
        if self._on_demand_due(curr_step):
            self._save_on_demand(curr_step)
        mode = self.async_mode
        if mode == AsyncMode.ASYNC_WITH_PINNED_MEM:
            self.async_mode = AsyncMode.ASYNC  # StrataStorageWriter stages into pinned memory
        try:
            return super()._save(curr_step, last_step)
        finally:
            self.async_mode = mode

    def _save_last_step(self, curr_step: int) -> None:
        self._to_files = self.last_save_model_only
        try:
            super()._save_last_step(curr_step)
        finally:
            self._to_files = False

    def _on_demand_due(self, step: int) -> bool:
        """Whether the job saves its on-demand step now. A notice may reach
        one process only: with agents, the agents agree on the step every
        rank saves (should_save turns true there); the ranks also agree here
        (one all_reduce on the CPU group per step), so that a rank the
        agents did not reach in time, or a job without agents, saves the
        same step."""
        if not self._config.on_demand or self._writer._ckpt is None:
            return False
        due = self._writer.checkpointer.should_save(step)
        if self._cpu_group is not None:
            flag = torch.tensor([1 if due else 0], dtype=torch.int32)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._cpu_group)
            if flag.item() and not due:
                self._writer.checkpointer.request_on_demand()
            due = bool(flag.item())
        return due

    def _save_on_demand(self, step: int) -> None:
        """Saves `step` synchronously (the whole state, after the save in
        flight) and exits with EXIT_AFTER_ON_DEMAND once it is committed."""
        logger.info(f"Strata: maintenance notice; saving on-demand step {step}")
        self.maybe_wait_for_saving()
        dcp.save(self._flattened_model_states_sd(), storage_writer=self._writer,
                 checkpoint_id=self._create_checkpoint_id(step), process_group=self._cpu_group)
        result = self._writer.last_result
        logger.info(f"Strata: on-demand step {step} committed ({result}); exiting")
        self._writer.close()
        raise SystemExit(strata.EXIT_AFTER_ON_DEMAND)

    # ---- loading ---------------------------------------------------------------------

    def _load(self, step: int = -1) -> bool:
        c = self._config
        reader = StrataStorageReader(c.directory, agent_job=self._job,
                                     backup=c.backup, process_group=self._cpu_group)
        if step != -1:
            reader.reset(checkpoint_id=step)
        found = reader.step
        if found is None:
            return super()._load(step)  # TorchTitan's initial load, or a fresh start
        logger.info(f"Strata: loading step {found} from {c.directory}")
        states = self._states_to_load(model_only=found == 0)
        dcp.load(states, storage_reader=reader, process_group=self._cpu_group)
        if MODEL in self.states:
            self.states[MODEL].load_state_dict(states)
        self.last_load_sources = dict(reader.sources)
        logger.info(f"Strata: loaded step {found} (sources {self.last_load_sources})")
        return True

    def _close(self) -> None:
        super()._close()
        if hasattr(self, "_writer"):
            self._writer.close()


def on_strata(config: Any, **options: Any) -> Any:
    """`config` (a TorchTitan Trainer.Config) with its checkpoint section
    replaced by StrataCheckpointManager.Config: every field of the old
    section that the new one has, then `options` (Strata's fields, or
    any other), and enable=True unless given."""
    old = config.checkpoint
    kept = {f.name: getattr(old, f.name) for f in dataclasses.fields(old)
            if f.name in {g.name for g in dataclasses.fields(StrataCheckpointManager.Config)}}
    kept["enable"] = True
    kept.update(options)
    config.checkpoint = StrataCheckpointManager.Config(**kept)
    return config
