"""One JAX process of a multi-tier checkpointing job, run by test_orbax.py.

It does what a training job on GKE does with the real `orbax-checkpoint`
package and a per-node replicator (here a `strata agent`):

1. ``multi_tier_checkpointing.initialize_multi_tier_checkpointing(local_dir,
   num_slices=..., run_name=..., backup_interval_steps=...)``: waits for the
   replicator's ``jax-init-info.txt``, calls ``jax.distributed.initialize``
   with the process id and coordinator written there, writes
   ``replicator.yaml``, waits for the replicator to take it, and turns the
   newest ``*.restore`` marker into the step ``<step>`` in the local
   directory;
2. ``ReplicatorCheckpointManager(local_dir, global_mesh=mesh)``: restores
   ``latest_step()`` (as MaxText does) with explicit shardings and checks
   every addressable shard against what that step must hold, then saves the
   steps asked for (each process its own shards, into its local directory).

It prints one line ``RESULT {json}`` (its process index, the steps Orbax
found in the local directory, the step restored or null, the shards checked,
the steps saved) and exits 0; any mismatch or error exits non-zero.

The process count: ``initialize_multi_tier_checkpointing`` passes
``jax.distributed.initialize`` only the process id and coordinator address;
the count comes from JAX's cluster detection (on GKE TPUs, ``GkeTpuCluster``
counts ``TPU_WORKER_HOSTNAMES``). On CPU there is no such environment, so
``_LoopbackCluster`` (JAX's documented extension point: ``ClusterEnv``
subclasses register themselves) gives it from ``ORBAX_WORKER_PROCESSES``.
"""

import argparse
import json
import os
import sys

from absl import flags
import jax
from jax._src import clusters
import numpy as np
from etils import epath
import orbax.checkpoint as ocp
from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import (
    initialization as mtc,
)
from orbax.checkpoint.experimental.emergency.replicator_checkpoint_manager import (
    ReplicatorCheckpointManager, ReplicatorCheckpointManagerOptions,
)

ROWS, COLS = 8, 16  # every array is this small: 4 processes share 2 cores


class _LoopbackCluster(clusters.ClusterEnv):
    """The process count of a job on loopback, from ORBAX_WORKER_PROCESSES."""

    name = "orbax-worker-loopback"

    @classmethod
    def is_env_present(cls) -> bool:
        return "ORBAX_WORKER_PROCESSES" in os.environ

    @classmethod
    def get_process_count(cls) -> int:
        return int(os.environ["ORBAX_WORKER_PROCESSES"])

    @classmethod
    def get_process_id(cls) -> int:
        raise RuntimeError("the process id comes from jax-init-info.txt")

    @classmethod
    def get_coordinator_address(cls, timeout_secs, override_coordinator_port) -> str:
        raise RuntimeError("the coordinator comes from jax-init-info.txt")


def expected_state(step: int):
    """The global arrays of `step`, the same in every process."""
    base = np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS)
    return {
        "w": base * 0.5 + step,                                      # split by columns
        "b": (np.arange(COLS, dtype=np.int32) * 7 + step * 1000),    # split
        "count": np.full((ROWS, 2), step, dtype=np.int32),           # replicated
    }


def specs():
    P = jax.sharding.PartitionSpec
    return {"w": P(None, "model"), "b": P("model"), "count": P()}


def make_mesh(slices: int) -> jax.sharding.Mesh:
    """A (data, model) mesh: a slice per row, so the processes at the same
    position of each slice hold the same shards (the replicator's peers)."""
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    grid = np.array(devices).reshape(slices, len(devices) // slices)
    return jax.sharding.Mesh(grid, ("data", "model"))


def global_state(step: int, mesh):
    out = {}
    for key, value in expected_state(step).items():
        sharding = jax.sharding.NamedSharding(mesh, specs()[key])
        out[key] = jax.make_array_from_callback(value.shape, sharding, lambda i, v=value: v[i])
    return out


def check_restored(restored, step: int, mesh) -> int:
    """Raises unless every addressable shard equals the expected slice and
    the arrays are placed as asked; the number of shards checked."""
    want = expected_state(step)
    checked = 0
    for key, value in want.items():
        got = restored[key]
        if got.shape != value.shape or got.dtype != value.dtype:
            raise AssertionError(f"{key}: {got.shape} {got.dtype}, want {value.shape} "
                                 f"{value.dtype}")
        if got.sharding.spec != specs()[key] or got.sharding.mesh.devices.shape != \
                mesh.devices.shape:
            raise AssertionError(f"{key}: restored with {got.sharding}")
        for shard in got.addressable_shards:
            if not np.array_equal(np.asarray(shard.data), value[shard.index]):
                raise AssertionError(f"{key} shard {shard.index} of step {step} differs: "
                                     f"{np.asarray(shard.data)!r} != {value[shard.index]!r}")
            checked += 1
    return checked


def restore_args(mesh):
    return pytree_restore(mesh, expected_state(0), specs())


def pytree_restore(mesh, template, partition_specs):
    """Orbax's restore arguments for arrays shaped like `template`'s, each
    sharded over `mesh` by its entry in `partition_specs`."""
    abstract, args = {}, {}
    for key, value in template.items():
        sharding = jax.sharding.NamedSharding(mesh, partition_specs[key])
        abstract[key] = jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=sharding)
        args[key] = ocp.ArrayRestoreArgs(sharding=sharding, global_shape=value.shape,
                                         dtype=value.dtype)
    return ocp.args.PyTreeRestore(item=abstract, restore_args=args)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--local-dir", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--slices", type=int, default=2)
    p.add_argument("--save", default="", help="comma-separated steps to save")
    p.add_argument("--backup-interval-steps", type=int, default=None)
    p.add_argument("--timeout", type=int, default=120)
    a = p.parse_args()
    # Orbax's restore reads an absl flag (experimental emergency multihost's
    # mesh-consistency switch); absl.app.run parses flags in real jobs.
    flags.FLAGS([sys.argv[0]])
    local = epath.Path(a.local_dir)

    mtc.initialize_multi_tier_checkpointing(
        local, num_slices=a.slices, run_name=a.job,
        backup_interval_steps=a.backup_interval_steps,
        jax_initialization_timeout_seconds=a.timeout, jax_shutdown_timeout_seconds=30)
    mesh = make_mesh(a.slices)
    manager = ReplicatorCheckpointManager(
        local, ReplicatorCheckpointManagerOptions(save_interval_steps=1), global_mesh=mesh)

    result = {"process": jax.process_index(), "restored": None, "shards": 0, "saved": [],
              "local_steps": sorted(manager.all_steps())}
    step = manager.latest_step()
    if step is not None:
        restored = manager.restore(step, args=ocp.args.Composite(state=restore_args(mesh)))
        result["shards"] = check_restored(restored["state"], step, mesh)
        result["restored"] = step
    for s in [int(x) for x in a.save.split(",") if x]:
        if not manager.save(s, args=ocp.args.Composite(
                state=ocp.args.PyTreeSave(global_state(s, mesh)))):
            raise AssertionError(f"step {s} was not saved")
        manager.wait_until_finished()
        result["saved"].append(s)
    manager.close()
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
