"""Strata: fast, multi-tier checkpoints for long-running training jobs.

The engine is libstrata (C++); this package is its Python face:

    import strata

    with strata.Checkpointer("/dev/shm/ckpt", save_interval_steps=100,
                             exit_after_ondemand=True) as ckpt:
        restored = ckpt.restore()           # None: start fresh
        start = restored.step + 1 if restored else 1
        for step in range(start, last + 1):
            train(step)
            if ckpt.should_save(step):      # an atomic load, no system call
                result = ckpt.save(step, {"weights": weights})  # any buffer
                if result.should_exit:      # the on-demand save after SIGTERM
                    sys.exit(strata.EXIT_AFTER_ON_DEMAND)

`strata.torch` saves and restores PyTorch models, optimizers, RNG states and
loader positions. docs/python.md is the guide.
"""

from strata._strata import (  # noqa: F401  (the public API)
    EXIT_AFTER_ON_DEMAND,
    AgentJob,
    Batch,
    Checkpointer,
    CheckpointerStatus,
    DataLossError,
    DeadlineExceededError,
    Error,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    Restored,
    SaveResult,
    UnavailableError,
    agent_handshake,
    copy_to_host,
    page_lock,
    page_unlock,
    restore_step,
    restore_step_items,
    restore_step_planned,
    version,
)

__version__ = version()

__all__ = [
    "EXIT_AFTER_ON_DEMAND",
    "AgentJob",
    "Batch",
    "Checkpointer",
    "CheckpointerStatus",
    "DataLossError",
    "DeadlineExceededError",
    "Error",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "NotFoundError",
    "Restored",
    "SaveResult",
    "UnavailableError",
    "agent_handshake",
    "copy_to_host",
    "page_lock",
    "page_unlock",
    "restore_step",
    "restore_step_items",
    "restore_step_planned",
    "version",
]
