"""strata's stager binding driving device memory without a GPU: the calls
strata.torch and strata.dcp make with CUDA tensors (save_batch with device
items and their streams, overlapped and ordered after, restore_planned into
device buffers, copy_to_host), on the emulated CUDA runtime the C++ tests
use (tests/harness/emulated_cudart.cc, docs/development.md). Each case runs
in a fresh interpreter (emulated_cuda_worker.py): a process loads its CUDA
runtime once. On a GPU machine scripts/gpu-check.sh runs the same paths
through torch (test_torch_staging.py's CUDA tests)."""

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
def test_stager_binding_on_the_emulated_runtime(case, tmp_path):
    env = dict(os.environ, STRATA_CUDART=EMULATED)
    run = subprocess.run([sys.executable, os.path.join(HERE, "emulated_cuda_worker.py"), case,
                          str(tmp_path / "ckpt")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr
