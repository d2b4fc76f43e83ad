"""One JAX process of a tiny training job with Orbax's replicator
checkpointing, run under `strata run` by test_orbax_training.py.

It trains a two-layer MLP by plain SGD (jax.grad, no optax) on synthetic
batches drawn from a fixed seed per step, over the (data, model) mesh of
orbax_worker.py: the batch split over ``data``, the hidden layer over
``model``. It does what MaxText's train loop does with its emergency
(replicator) checkpointing switched on:

* ``initialize_multi_tier_checkpointing`` and a ``ReplicatorCheckpointManager``
  (orbax_worker.py has the details), restoring ``latest_step()``;
* after every step ``manager.save(step, ...)``: Orbax saves when
  ``save_interval_steps`` says so, or when JAX's preemption sync point is
  reached (its ``PreemptionCheckpointingPolicy``);
* then, as MaxText's ``train.py``: ``if manager.reached_preemption(step):
  manager.wait_until_finished()`` and exit, here with 75
  (``strata.EXIT_AFTER_ON_DEMAND``) so that `strata run` restarts it at once
  (MaxText's ``sys.exit()`` exits 0, which a supervisor takes for "done").

The preemption notice is a SIGTERM to any one process of the job: JAX's
preemption sync manager (started by ``jax.distributed.initialize``) catches
it, tells the other processes through the coordination service, and they
agree on the sync step, the largest step any of them reached plus one.
`strata maintenance` sends that SIGTERM to the processes registered in its
node's sync map. Orbax does not register there (only libstrata does), so
``SyncSlot`` claims a slot for this process and keeps its step in it, as
libstrata's Checkpointer would; see docs/agent-protocol.md, *What the real Orbax
does*.

Rank 0 prints ``LOSS <step> <repr(loss)>`` for every step; every process
prints ``RESTORED <step>`` (or ``RESTORED none``), ``ON-DEMAND <step>`` when
it saved at the preemption sync point, and ``DONE <step>`` at the end.
"""

import argparse
import mmap
import os
import struct
import sys
import time

from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
from etils import epath
import orbax.checkpoint as ocp
from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import (
    initialization as mtc,
)
from orbax.checkpoint.experimental.emergency.replicator_checkpoint_manager import (
    ReplicatorCheckpointManager, ReplicatorCheckpointManagerOptions,
)

import orbax_worker  # noqa: F401  (registers the loopback ClusterEnv)
from orbax_worker import make_mesh, pytree_restore

EXIT_AFTER_ON_DEMAND = 75  # strata::kExitAfterOnDemand
IN, HIDDEN, OUT, BATCH = 8, 16, 4, 32
LEARNING_RATE = 0.05

P = jax.sharding.PartitionSpec
PARAM_SPECS = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None), "b2": P()}


class SyncSlot:
    """This process's slot in its node agent's sync map (src/format/sync_map.h:
    a 64-byte header, then 63 slots of eight 64-bit fields), which is how
    `strata maintenance` finds the processes to send SIGTERM to. One process
    per node claims a slot here, so a plain store stands in for the
    library's compare-and-swap."""

    MAGIC, VERSION, SLOTS = 0x50414D434E595353, 1, 63
    PID, CURRENT_STEP, SAVED_STEP, SERVED = 0, 1, 3, 4  # slot fields
    GENERATION = 2  # header field

    def __init__(self, local_dir: str, timeout: float):
        path = os.path.join(local_dir, ".strata-agent", "sync.map")
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no sync map {path}: is the node agent running?")
            time.sleep(0.1)
        fd = os.open(path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, 4096)
        finally:
            os.close(fd)
        if struct.unpack_from("<QII", self._map, 0) != (self.MAGIC, self.VERSION, self.SLOTS):
            raise RuntimeError(f"{path} is not a version 1 sync map")
        self._q = memoryview(self._map).cast("q")  # aligned 8-byte stores
        for i in range(self.SLOTS):
            base = 8 + 8 * i
            if not _alive(self._q[base + self.PID]):
                self._base = base
                break
        else:
            raise RuntimeError(f"no free slot in {path}")
        self._q[base + self.PID] = -1  # kClaiming while the fields are reset
        for field, value in ((1, -1), (2, 0), (3, -1), (4, 0), (5, 0), (6, 0)):
            self._q[base + field] = value
        self._q[base + self.PID] = os.getpid()

    def at(self, step: int) -> None:
        self._q[self._base + self.CURRENT_STEP] = step

    def saved_on_demand(self, step: int) -> None:
        self._q[self._base + self.SAVED_STEP] = step
        self._q[self._base + self.SERVED] = self._q[self.GENERATION]

    def release(self) -> None:
        self._q[self._base + self.PID] = 0


def _alive(pid: int) -> bool:
    if pid == 0:
        return False
    if pid < 0:
        return True  # being claimed
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return True


def initial_params() -> dict:
    rng = np.random.default_rng(1234)
    return {
        "w1": (rng.standard_normal((IN, HIDDEN)) * 0.3).astype(np.float32),
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": (rng.standard_normal((HIDDEN, OUT)) * 0.3).astype(np.float32),
        "b2": np.zeros(OUT, np.float32),
    }


def batch(step: int):
    """The step's batch, the same in every process and every run."""
    rng = np.random.default_rng(step)
    x = rng.standard_normal((BATCH, IN)).astype(np.float32)
    teacher = np.random.default_rng(99).standard_normal((IN, OUT)).astype(np.float32)
    y = np.tanh(x @ teacher) + 0.01 * rng.standard_normal((BATCH, OUT)).astype(np.float32)
    return x, y


def to_global(value: np.ndarray, mesh, spec) -> jax.Array:
    sharding = jax.sharding.NamedSharding(mesh, spec)
    return jax.make_array_from_callback(value.shape, sharding, lambda i: value[i])


def loss_fn(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)


@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads), loss


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--local-dir", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--slices", type=int, default=2)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--save-interval", type=int, default=10)
    p.add_argument("--step-seconds", type=float, default=0.0,
                   help="sleep after each step, so that a notice lands mid-run")
    p.add_argument("--timeout", type=int, default=120)
    a = p.parse_args()
    flags.FLAGS([sys.argv[0]])  # Orbax's restore reads an absl flag
    local = epath.Path(a.local_dir)
    slot = SyncSlot(a.local_dir, a.timeout)

    mtc.initialize_multi_tier_checkpointing(
        local, num_slices=a.slices, run_name=a.job,
        jax_initialization_timeout_seconds=a.timeout, jax_shutdown_timeout_seconds=30)
    mesh = make_mesh(a.slices)
    manager = ReplicatorCheckpointManager(
        local, ReplicatorCheckpointManagerOptions(save_interval_steps=a.save_interval),
        global_mesh=mesh)
    rank0 = jax.process_index() == 0

    start = manager.latest_step()
    if start is None:
        params = {k: to_global(v, mesh, PARAM_SPECS[k]) for k, v in initial_params().items()}
        start = 0
    else:
        restored = manager.restore(start, args=ocp.args.Composite(state=pytree_restore(mesh, initial_params(), PARAM_SPECS)))
        params = dict(restored["state"])
    print(f"RESTORED {start or 'none'}", flush=True)

    data = P("data", None)
    for step in range(start + 1, a.steps + 1):
        x, y = batch(step)
        params, loss = train_step(params, to_global(x, mesh, data), to_global(y, mesh, data))
        value = float(np.asarray(loss.addressable_data(0)))
        if rank0:
            print(f"LOSS {step} {value!r}", flush=True)
        slot.at(step)
        manager.save(step, args=ocp.args.Composite(state=ocp.args.PyTreeSave(params)))
        if manager.reached_preemption(step):  # MaxText's train loop, as it is
            manager.wait_until_finished()
            slot.saved_on_demand(step)
            print(f"ON-DEMAND {step}", flush=True)
            manager.close()
            slot.release()
            return EXIT_AFTER_ON_DEMAND
        time.sleep(a.step_seconds)
    manager.wait_until_finished()
    manager.close()
    slot.release()
    print(f"DONE {a.steps}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
