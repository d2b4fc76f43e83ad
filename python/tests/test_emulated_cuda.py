"""The GPU paths of the Python side without a GPU, on the emulated CUDA
runtime the C++ tests use (tests/harness/emulated_cudart.cc,
docs/development.md):

* strata's stager binding driving device memory through ctypes
  (emulated_cuda_worker.py): save_batch with device items and their
  streams, overlapped and ordered after, restore_planned into device
  buffers, copy_to_host;
* torch itself on the emulated devices (emulated_torch_worker.py): the
  runtime is preloaded under torch's libcudart and found as libcuda.so.1,
  so torch's CUDA tensors, streams and allocators run on it, and
  strata.torch and strata.dcp save and restore them unchanged. Kernels are
  not emulated: those states are made and changed by copies.

Each case runs in a fresh interpreter: a process loads its CUDA runtime
once. On a GPU machine scripts/gpu-check.sh runs the same paths on the
device (test_torch_staging.py's CUDA tests)."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SUITE = os.environ.get("STRATA_TEST_SUITE", "")
EMULATED = os.path.join(SUITE, "tests", "libstrata-emulated-cudart.so")

pytestmark = pytest.mark.skipif(
    not os.path.exists(EMULATED),
    reason=f"no emulated CUDA runtime at {EMULATED} (built with the C++ tests)")


@pytest.mark.parametrize("case", ["overlapped_save", "planned_restore", "refusals"])
def test_stager_binding_on_the_emulated_runtime(case, scratch):
    env = dict(os.environ, STRATA_CUDART=EMULATED)
    run = subprocess.run([sys.executable, os.path.join(HERE, "emulated_cuda_worker.py"), case,
                          str(scratch / "ckpt")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr


TORCH_CASES = ["devices_as_torch_sees_them", "blocking_save", "overlapped_save",
               "overlapped_save_on_side_streams", "a_change_outside_the_step",
               "a_wait_from_another_thread", "dcp_round_trip", "one_device_of_two",
               "two_optimizers_on_two_streams", "staging_a_dtensor_on_a_cuda_mesh",
               "a_synchronous_dcp_save_copies_in_one_batch"]


@pytest.mark.parametrize("case", TORCH_CASES)
def test_torch_on_the_emulated_runtime(case, tmp_path, scratch):
    driver = tmp_path / "driver"  # what torch opens as the driver: the same library
    driver.mkdir()
    os.symlink(EMULATED, driver / "libcuda.so.1")
    library_path = os.environ.get("LD_LIBRARY_PATH", "")
    env = dict(os.environ, STRATA_CUDART=EMULATED, LD_PRELOAD=EMULATED,
               LD_LIBRARY_PATH=f"{driver}:{library_path}" if library_path else str(driver))
    run = subprocess.run([sys.executable, os.path.join(HERE, "emulated_torch_worker.py"), case,
                          str(scratch / "ckpt")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr
