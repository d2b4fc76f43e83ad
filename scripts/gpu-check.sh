#!/usr/bin/env bash
# The one script a session runs on a lent GPU machine (no network; its own
# Python with a CUDA torch, pybind11 and nvcc). Builds the Python extension
# there, runs the CUDA tests of strata.torch and the GPU benchmark at size,
# and leaves everything under $OUT (default ./gpu-check-out), eight files at most:
#   env.txt        python, torch, CUDA, nvidia-smi
#   build.log      the build of strata_python (and unit_tests; unit.log when cmake built)
#   cuda.log       tests/engine/cuda_stager_test.cc, cuda_runtime_rules_test.cc (CudaStager),
#                  its two tests of which CUDA contexts exist, each run alone, and
#                  $BUILD/bench/cuda_bench --size-mib ${STRATA_GPU_CUDA_BENCH_MIB:-4096}
#                  (the benchmarks run on a tmpfs mounted huge=within_size, as
#                  deploy/ mounts the RAM disk, where root can; else /dev/shm)
#   pytest.log     python/tests/test_torch_staging.py test_torch_stage.py test_torch.py
#                  test_api.py test_torch_dtensor.py (CUDA tests run, none skipped for
#                  lack of CUDA)
#   bench.log      bench/gpu_bench.py --size-mib ${STRATA_GPU_BENCH_MIB:-6144}: both states
#                  (big Linear layers; a ~1,000-tensor bf16 transformer), first and
#                  warm saves, overlapped, committed, restore, DCP
#                  and, after them, where each target row's time goes (a cProfile of
#                  one more call of each; STRATA_GPU_PROFILE=0: none)
#   bench.json     the same figures as JSON
#   per_tensor.log bench/torch_bench.py torch_per_tensor_cuda: the Python time per
#                  tensor of a save and a restore of 2,000 tensors on the GPU
#   summary.txt    the exit status of each part and the `ratio` lines
#
# Usage: scripts/gpu-check.sh [python]   (default: python3 on PATH)
#        scripts/gpu-check.sh --pack     (here, before: see "Prebuilt engine")
#
# Prebuilt engine: the full cmake build needs fmt, spdlog, OpenSSL, curl,
# yaml-cpp, ... which a bare GPU machine may lack. `--pack`, run on the dev
# machine, puts build/src/libstrata.a (debug info stripped) and the shared
# libraries the extension links (xxhash, spdlog, fmt), and the two small
# archives its layouts.cc needs (strata_backup, strata_store_layout), in
# .gpu-carry/ (git-ignored via .git/info/exclude), with GoogleTest's archives
# and headers; name `.gpu-carry` in the run's carry. When cmake fails there,
# the extension alone (python/src/*.cc) is compiled against that
# archive for the machine's Python, and so are the C++ CUDA test and bench.
# Env:   OUT, STRATA_GPU_BENCH_MIB (gpu_bench, 6144), STRATA_GPU_CUDA_BENCH_MIB (4096),
#        STRATA_GPU_DEADLINE (seconds for the whole script, 3600; each step's timeout is cut to it),
#        STRATA_GPU_BENCH_REPS (5), STRATA_GPU_BENCH_STATES (linear,transformer),
#        STRATA_GPU_BENCH_TMPFS (the benchmarks' scratch: say /dev/shm for 4 KiB pages),
#        STRATA_GPU_BENCH_SKIP (gpu_bench.py --skip: torch,dcp),
#        STRATA_GPU_PROFILE (1: gpu_bench.py --profile, appended to bench.log; 0: none),
#        STRATA_GPU_PREBUILT=1 (skip the cmake attempt: use .gpu-carry at once),
#        STRATA_GPU_ONLY=cuda-tests (stop after the C++ CUDA tests),
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
  for lib in strata_backup strata_store_layout; do  # the extension's layouts.cc links them
    strip --strip-debug -o .gpu-carry/lib$lib.a build/src/lib$lib.a
  done
  for lib in $(ldd build/python/strata/_strata*.so | awk '$3 ~ /^\// {print $3}' |
               grep -E 'xxhash|spdlog|fmt'); do cp -L "$lib" .gpu-carry/; done
  cp /usr/lib/x86_64-linux-gnu/libgtest.a /usr/lib/x86_64-linux-gnu/libgtest_main.a .gpu-carry/
  mkdir -p .gpu-carry/include && cp -r /usr/include/gtest .gpu-carry/include/
  du -sh .gpu-carry; ls .gpu-carry; exit 0
fi
mkdir -p "$OUT"
# Every step's timeout is cut to what is left of STRATA_GPU_DEADLINE seconds
# (from the start), so one call of the device tool ends with its files.
DEADLINE=${STRATA_GPU_DEADLINE:-3600}
budget() { local left=$((DEADLINE - SECONDS)); ((left < 5)) && left=5; echo $((left < $1 ? left : $1)); }
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
: > "$OUT/summary.txt"

{
  echo "python: $PY"; "$PY" -VV
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])'
  nvidia-smi || true; nvcc --version || true; cmake --version | head -1
  df -h /dev/shm /tmp; free -g; nproc
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
rc=$?; cmake_rc=$rc; summary "cmake build rc=$rc"
TESTS="python/tests/test_torch_staging.py python/tests/test_torch_stage.py python/tests/test_torch.py python/tests/test_api.py python/tests/test_torch_dtensor.py"
if [ $rc -eq 0 ]; then
  timeout "$(budget 300)" "$BUILD/tests/unit_tests" --gtest_filter='Checkpointer*:Staging*' \
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
    objs=()  # one compiler per source file, all at once
    for src in python/src/*.cc; do
      obj="$BUILD/python/$(basename "$src" .cc).o"; objs+=("$obj")
      "$CXX" -std=c++20 -O2 -fPIC -fvisibility=hidden -Wall -Wextra -Iinclude -Isrc \
        $("$PY" -m pybind11 --includes) -c "$src" -o "$obj" &
    done
    for _ in "${objs[@]}"; do wait -n || exit 1; done
    "$CXX" -shared "${objs[@]}" \
      .gpu-carry/libstrata_backup.a .gpu-carry/libstrata_store_layout.a .gpu-carry/libstrata.a \
      $LIBS -Wl,-rpath,"$PWD/.gpu-carry" -lpthread \
      -o "$BUILD/python/strata/_strata$EXT"
  ) >> "$OUT/build.log" 2>&1
  rc=$?; summary "prebuilt-engine build rc=$rc"
  [ $rc -ne 0 ] && { tail -30 "$OUT/build.log"; exit 1; }
  export LD_LIBRARY_PATH="$PWD/.gpu-carry${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  TESTS="python/tests/test_torch_staging.py python/tests/test_torch_stage.py python/tests/test_torch.py"  # no CLI binary here
else
  tail -30 "$OUT/build.log"; summary "no build (and no .gpu-carry: run --pack here first)"
  exit 1
fi

# The C++ CUDA path: CudaStager's tests and bench, against the same engine.
# The runtime is found by dlopen: the toolkit's, else the one torch ships.
CUDART_DIRS=$(ls -d /usr/local/cuda/lib64 2>/dev/null; "$PY" -c 'import glob, os, torch
print(":".join(glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "*", "lib"))))' 2>/dev/null)
export LD_LIBRARY_PATH="$(echo $CUDART_DIRS | tr ' ' ':')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ $cmake_rc -eq 0 ]; then
  cmake --build "$BUILD" -j"$JOBS" --target cuda_tests cuda_bench >> "$OUT/build.log" 2>&1
  CUDA_TESTS="$BUILD/tests/cuda_tests" CUDA_BENCH="$BUILD/bench/cuda_bench"
else
  CUDA_TESTS="$BUILD/cuda_tests" CUDA_BENCH="$BUILD/cuda_bench"
  (
    set -x
    "$CXX" -std=c++20 -O2 -Iinclude -Isrc -Itests/harness -I.gpu-carry/include \
      -DSTRATA_BINARY_DIR="\"$PWD/$BUILD\"" -DSTRATA_VENV_BIN="\"/nonexistent\"" \
      tests/engine/cuda_stager_test.cc tests/engine/cuda_runtime_rules_test.cc \
      tests/harness/test_util.cc .gpu-carry/libgtest_main.a .gpu-carry/libgtest.a \
      .gpu-carry/libstrata.a $LIBS -Wl,-rpath,"$PWD/.gpu-carry" -ldl -lpthread -o "$CUDA_TESTS" &
    "$CXX" -std=c++20 -O2 -Iinclude -Isrc bench/cuda_bench.cc .gpu-carry/libstrata.a $LIBS \
      -Wl,-rpath,"$PWD/.gpu-carry" -ldl -lpthread -o "$CUDA_BENCH" &
    wait -n && wait -n
  ) >> "$OUT/build.log" 2>&1
  summary "C++ CUDA test and bench build rc=$?"
fi
echo "== cuda_tests" > "$OUT/cuda.log"
timeout "$(budget 120)" "$CUDA_TESTS" > "$OUT/cuda_unit.tmp" 2>&1
rc=$?; cat "$OUT/cuda_unit.tmp" >> "$OUT/cuda.log"
summary "cuda_tests rc=$rc ($(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/cuda_unit.tmp" | tr '\n' ' '))"
# The tests of which contexts exist, each in a process of its own (the
# run above made device 0's context early): the driver's answer is found
# through the loaded libcuda.so.1, which the emulator never exercises.
for t in PrimaryContextMadeTellsWhatTheDriverHas NoContextIsMadeOnADeviceTheStateIsNotOn; do
  echo "== cuda_tests $t alone" >> "$OUT/cuda.log"
  timeout "$(budget 60)" "$CUDA_TESTS" --gtest_filter="*.$t" > "$OUT/cuda_unit.tmp" 2>&1
  rc=$?; cat "$OUT/cuda_unit.tmp" >> "$OUT/cuda.log"
  summary "cuda_tests $t rc=$rc ($(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/cuda_unit.tmp" | tail -1))"
done
rm -f "$OUT/cuda_unit.tmp"
[ "${STRATA_GPU_ONLY:-}" = cuda-tests ] && exit 0
# The benchmarks' scratch: a RAM disk as deploy/ mounts a node's (a tmpfs
# with huge=within_size) where this user may mount one, else /dev/shm.
SCRATCH=${STRATA_GPU_BENCH_TMPFS:-}
if [ -z "$SCRATCH" ]; then
  SCRATCH=/dev/shm  # unless a container made it too small for both states' steps
  avail() { df -Pk "$1" 2>/dev/null | awk 'NR == 2 {print $4}'; }
  (( $(avail /dev/shm || echo 0) < 60 << 20 && $(avail /tmp || echo 0) > $(avail /dev/shm || echo 0) )) &&
    SCRATCH=/tmp
  ramdisk=$(mktemp -d /tmp/strata-gpu-ramdisk.XXXXXX)
  if mount -t tmpfs -o size=96g,huge=within_size,mode=0700 tmpfs "$ramdisk" 2>/dev/null; then
    SCRATCH=$ramdisk
    trap 'umount -l "$ramdisk"; rmdir "$ramdisk"' EXIT
  else
    rmdir "$ramdisk"
  fi
fi
summary "benchmark scratch: $SCRATCH ($(findmnt -no FSTYPE,OPTIONS -T "$SCRATCH" 2>/dev/null | head -1))"

# In the order the work needs them most: the Python tests, the two-state
# table, the per-tensor cost, then the C++ stager's benchmark.
export PYTHONPATH="$PWD/$BUILD/python" STRATA_BIN="$PWD/$BUILD/strata" \
       STRATA_TEST_SUITE="$PWD/$BUILD"
timeout "$(budget 150)" "$PY" -m pytest -q -rs -p no:cacheprovider $TESTS > "$OUT/pytest.log" 2>&1
summary "pytest rc=$? ($(tail -1 "$OUT/pytest.log"))"
grep -n "SKIPPED.*CUDA" "$OUT/pytest.log" && summary "WARNING: CUDA tests were skipped"

PROFILE=()
PROFILE_FILE="$SCRATCH/strata-gpu-profile-$$.txt"
[ "${STRATA_GPU_PROFILE:-1}" = 1 ] && PROFILE=(--profile "$PROFILE_FILE")
PYTHONUNBUFFERED=1 timeout "$(budget 420)" "$PY" bench/gpu_bench.py \
  --size-mib "${STRATA_GPU_BENCH_MIB:-6144}" --states "${STRATA_GPU_BENCH_STATES:-linear,transformer}" \
  --reps "${STRATA_GPU_BENCH_REPS:-5}" ${STRATA_GPU_BENCH_SKIP:+--skip "$STRATA_GPU_BENCH_SKIP"} \
  --tmpfs "$SCRATCH" --json "$OUT/bench.json" \
  ${PROFILE[@]+"${PROFILE[@]}"} > "$OUT/bench.log" 2>&1
summary "bench rc=$?"
if [ -f "$PROFILE_FILE" ]; then  # in bench.log: the tool returns eight files at most
  { echo; echo "== profile (gpu_bench.py --profile)"; cat "$PROFILE_FILE"; } >> "$OUT/bench.log"
  rm -f "$PROFILE_FILE"
fi
grep '^ratio ' "$OUT/bench.log" | tee -a "$OUT/summary.txt"

timeout "$(budget 90)" "$PY" bench/torch_bench.py torch_per_tensor_cuda > "$OUT/per_tensor.log" 2>&1
summary "per-tensor rc=$?"
grep '^ratio ' "$OUT/per_tensor.log" | tee -a "$OUT/summary.txt"

echo "== cuda_bench" >> "$OUT/cuda.log"
timeout "$(budget 150)" "$CUDA_BENCH" --size-mib "${STRATA_GPU_CUDA_BENCH_MIB:-4096}" \
  --reps "${STRATA_GPU_BENCH_REPS:-5}" --dir "$SCRATCH/strata-cuda-bench-$$" \
  >> "$OUT/cuda.log" 2>&1
summary "cuda_bench rc=$?"
grep '^ratio ' "$OUT/cuda.log" | tee -a "$OUT/summary.txt"
exit 0
