#!/usr/bin/env bash
# The one script a session runs on a lent GPU machine (no network; its own
# Python with a CUDA torch, pybind11 and nvcc). Builds the Python extension
# there, runs the CUDA tests of strata.torch and the GPU benchmark at size,
# and leaves everything under $OUT (default ./gpu-check-out):
#   env.txt        python, torch, CUDA, nvidia-smi
#   build.log      cmake configure + build of strata_python (and unit_tests)
#   unit.log       build/tests/unit_tests --gtest_filter='Checkpointer*:Staging*'
#   pytest.log     python/tests/test_torch_staging.py test_torch.py test_api.py
#                  test_torch_dtensor.py (CUDA tests run, none skipped for lack of CUDA)
#   bench.log      bench/gpu_bench.py --size-mib ${STRATA_GPU_BENCH_MIB:-4096}
#   bench.json     the same figures as JSON
#   summary.txt    the exit status of each part and the `ratio` lines
#
# Usage: scripts/gpu-check.sh [python]   (default: python3 on PATH)
#        scripts/gpu-check.sh --pack     (here, before: see "Prebuilt engine")
#
# Prebuilt engine: the full cmake build needs fmt, spdlog, OpenSSL, curl,
# yaml-cpp, ... which a bare GPU machine may lack. `--pack`, run on the dev
# machine, puts build/src/libstrata.a (debug info stripped) and the shared
# libraries the extension links (xxhash, spdlog, fmt) in
# .gpu-carry/ (git-ignored via .git/info/exclude); name `.gpu-carry` in the
# run's carry. When cmake fails there, the extension alone (module.cc,
# buffers.cc) is compiled against that archive for the machine's Python.
# Env:   OUT, STRATA_GPU_BENCH_MIB (default 4096), STRATA_GPU_BENCH_REPS (5),
#        STRATA_GPU_BENCH_SKIP (gpu_bench.py --skip: torch,dcp),
#        STRATA_GPU_PREBUILT=1 (skip the cmake attempt: use .gpu-carry at once),
#        STRATA_GPU_BUILD (build dir, default build-gpu), JOBS (default nproc)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${1:-$(command -v python3)}
OUT=${OUT:-$PWD/gpu-check-out}
BUILD=${STRATA_GPU_BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc)}
if [ "${1:-}" = "--pack" ]; then
  rm -rf .gpu-carry && mkdir -p .gpu-carry
  grep -qx '/.gpu-carry/' .git/info/exclude 2>/dev/null || echo '/.gpu-carry/' >> .git/info/exclude
  strip --strip-debug -o .gpu-carry/libstrata.a build/src/libstrata.a
  for lib in $(ldd build/python/strata/_strata*.so | awk '$3 ~ /^\// {print $3}' |
               grep -E 'xxhash|spdlog|fmt'); do cp -L "$lib" .gpu-carry/; done
  du -sh .gpu-carry; ls .gpu-carry; exit 0
fi
mkdir -p "$OUT"
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
: > "$OUT/summary.txt"

{
  echo "python: $PY"; "$PY" -VV
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])'
  nvidia-smi || true; nvcc --version || true; cmake --version | head -1
} > "$OUT/env.txt" 2>&1

# Build: the extension for this Python (and the engine's unit tests).
PYBIND_DIR=$("$PY" -c 'import pybind11; print(pybind11.get_cmake_dir())' 2>/dev/null)
GEN=""; command -v ninja >/dev/null && GEN="-G Ninja"
if [ "${STRATA_GPU_PREBUILT:-0}" = 1 ]; then
  echo "STRATA_GPU_PREBUILT=1: no cmake build" > "$OUT/build.log"; false
else {
  cmake -S . -B "$BUILD" $GEN -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_PYTHON=ON \
        -DPython_EXECUTABLE="$PY" -DPython3_EXECUTABLE="$PY" -DPYTHON_EXECUTABLE="$PY" \
        ${PYBIND_DIR:+-Dpybind11_DIR="$PYBIND_DIR"} &&
  cmake --build "$BUILD" -j"$JOBS" --target strata_python unit_tests strata
} > "$OUT/build.log" 2>&1; fi
rc=$?; summary "cmake build rc=$rc"
TESTS="python/tests/test_torch_staging.py python/tests/test_torch.py python/tests/test_api.py python/tests/test_torch_dtensor.py"
if [ $rc -eq 0 ]; then
  timeout 300 "$BUILD/tests/unit_tests" --gtest_filter='Checkpointer*:Staging*' \
    > "$OUT/unit.log" 2>&1
  summary "unit_tests rc=$?"
elif [ -f .gpu-carry/libstrata.a ]; then
  # The extension alone, against the engine built on the dev machine.
  mkdir -p "$BUILD/python/strata"
  cp python/strata/*.py "$BUILD/python/strata/"
  EXT=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  CXX=${CXX:-$(command -v g++ || command -v c++)}
  LIBS=$(ls .gpu-carry/lib*.so* | grep -v 'stdc++')
  (
    set -x
    "$CXX" -std=c++20 -O2 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Iinclude \
      $("$PY" -m pybind11 --includes) python/src/module.cc python/src/buffers.cc \
      .gpu-carry/libstrata.a $LIBS -Wl,-rpath,"$PWD/.gpu-carry" -lpthread \
      -o "$BUILD/python/strata/_strata$EXT"
  ) >> "$OUT/build.log" 2>&1
  rc=$?; summary "prebuilt-engine build rc=$rc"
  [ $rc -ne 0 ] && { tail -30 "$OUT/build.log"; exit 1; }
  export LD_LIBRARY_PATH="$PWD/.gpu-carry${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  TESTS="python/tests/test_torch_staging.py python/tests/test_torch.py"  # no CLI binary here
else
  tail -30 "$OUT/build.log"; summary "no build (and no .gpu-carry: run --pack here first)"
  exit 1
fi

export PYTHONPATH="$PWD/$BUILD/python" STRATA_BIN="$PWD/$BUILD/strata" \
       STRATA_TEST_SUITE="$PWD/$BUILD"
timeout 150 "$PY" -m pytest -q -rs -p no:cacheprovider $TESTS > "$OUT/pytest.log" 2>&1
summary "pytest rc=$? ($(tail -1 "$OUT/pytest.log"))"
grep -n "SKIPPED.*CUDA" "$OUT/pytest.log" && summary "WARNING: CUDA tests were skipped"

PYTHONUNBUFFERED=1 timeout 380 "$PY" bench/gpu_bench.py --size-mib "${STRATA_GPU_BENCH_MIB:-4096}" \
  --reps "${STRATA_GPU_BENCH_REPS:-5}" ${STRATA_GPU_BENCH_SKIP:+--skip "$STRATA_GPU_BENCH_SKIP"} \
  --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
summary "bench rc=$?"
grep '^ratio ' "$OUT/bench.log" | tee -a "$OUT/summary.txt"
exit 0
