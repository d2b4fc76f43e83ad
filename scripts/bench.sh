#!/usr/bin/env bash
# Runs the engine benchmarks (bench/engine_bench.cc), the agent benchmarks
# (bench/agent_bench.cc), the storage benchmarks (bench/storage_bench.cc,
# against a moto_server it starts), the erasure codes (bench/ec_bench.cc),
# the peer tier over 8 in-process nodes (bench/coded_bench.cc: copies
# against codes, a decode against a fetch, replication by content),
# then the PyTorch benchmarks
# (bench/torch_bench.py, when the Python package is built) and the control
# plane at scale (bench/scale_bench.cc, benchmark name "scale"; it takes
# none of the flags below, STRATA_SCALE_NODES sets its node counts), the
# C++ CUDA path (bench/cuda_bench.cc, name "cuda": on a machine without a
# GPU it says so and measures nothing; STRATA_CUDA_BENCH_SIZE_MIB, default
# 4096, sets its state), and
# repeats their `ratio <name> <value> target <t>` and `scale nodes=…` lines
# as a summary at the end, then compares every figure with the last
# committed results (scripts/bench-compare, bench/results.txt).
#
# Usage: scripts/bench.sh [BUILD_DIR [flags and benchmark names]]
# Flags (--size-mib, --reps, --tmpfs) go to every binary; each benchmark
# name goes to the binary that has it, and a binary none of the names
# belongs to is skipped.
# Environment: STRATA_BENCH_SIZE_MIB (state size; default 512 for the
#              engine, 256 for the agent and storage),
#              STRATA_CODED_BENCH_SIZE_MIB (each of coded_bench's 8 nodes'
#              step; default 64), STRATA_BENCH_REPS
#              (timed repetitions, default 9; storage: 3, or
#              STRATA_STORAGE_BENCH_REPS), STRATA_BENCH_TMPFS (scratch
#              parent, default /dev/shm), STRATA_BENCH_RAMDISK=huge (as
#              root: the scratch is a tmpfs mounted for the run as
#              deploy/systemd/local.mount mounts a node's RAM disk, with
#              huge=within_size; docs/performance.md gives both).
set -euo pipefail

build_dir=${1:-build}
[ $# -gt 0 ] && shift
agent_benchmarks=" peer_replication restore_from_peer restart_check tls_cost "
storage_benchmarks=" backup_upload backup_restore "
ec_benchmarks=" ec_encode ec_ram ec_rebuild "
coded_benchmarks=" coded_ram coded_restore dedup "
torch_benchmarks=" torch_save_blocking torch_load torch_per_tensor torch_per_tensor_cuda dcp_per_tensor "
run_scale=0
run_cuda=0
flags=()
engine_names=()
agent_names=()
storage_names=()
ec_names=()
coded_names=()
torch_names=()
while [ $# -gt 0 ]; do
  case $1 in
    -h | --help | --*=*) flags+=("$1") ;;
    -*)
      flags+=("$1")
      if [ $# -gt 1 ]; then
        flags+=("$2")
        shift
      fi
      ;;
    scale) run_scale=1 ;;
    cuda) run_cuda=1 ;;
    *)
      if [[ $agent_benchmarks == *" $1 "* ]]; then
        agent_names+=("$1")
      elif [[ $storage_benchmarks == *" $1 "* ]]; then
        storage_names+=("$1")
      elif [[ $ec_benchmarks == *" $1 "* ]]; then
        ec_names+=("$1")
      elif [[ $coded_benchmarks == *" $1 "* ]]; then
        coded_names+=("$1")
      elif [[ $torch_benchmarks == *" $1 "* ]]; then
        torch_names+=("$1")
      else
        engine_names+=("$1")
      fi
      ;;
  esac
  shift
done

runs=()  # binaries to run, in order; no names: all of them
any_names=$((${#engine_names[@]} + ${#agent_names[@]} + ${#storage_names[@]} + ${#ec_names[@]} + ${#coded_names[@]} + ${#torch_names[@]} + run_scale + run_cuda))
if [ "$any_names" -eq 0 ] || [ ${#engine_names[@]} -gt 0 ]; then runs+=(engine_bench); fi
if [ "$any_names" -eq 0 ] || [ ${#agent_names[@]} -gt 0 ]; then runs+=(agent_bench); fi
if [ "$any_names" -eq 0 ] || [ ${#storage_names[@]} -gt 0 ]; then runs+=(storage_bench); fi
if [ "$any_names" -eq 0 ] || [ ${#ec_names[@]} -gt 0 ]; then runs+=(ec_bench); fi
if [ "$any_names" -eq 0 ] || [ ${#coded_names[@]} -gt 0 ]; then runs+=(coded_bench); fi
if [ ${#torch_names[@]} -gt 0 ] || { [ "$any_names" -eq 0 ] && [ -d "$build_dir/python/strata" ]; }; then
  runs+=(torch_bench)
fi
if [ "$any_names" -eq 0 ] || [ "$run_scale" -eq 1 ]; then runs+=(scale_bench); fi
if [ "$any_names" -eq 0 ] || [ "$run_cuda" -eq 1 ]; then runs+=(cuda_bench); fi
# bench/torch_bench.py: torch_per_tensor_cuda in a process of its own, on
# the GPU if there is one, else on the emulated CUDA runtime (no delay),
# preloaded under torch and found as libcuda.so.1 as
# python/tests/test_emulated_cuda.py does; the others on the CPU.
run_torch_bench() {
  local python=${STRATA_VENV:-$(dirname "$0")/../.venv}/bin/python
  local script=$(dirname "$0")/../bench/torch_bench.py
  local cpu=() cuda=0 n
  for n in ${torch_names[@]+"${torch_names[@]}"}; do
    if [ "$n" = torch_per_tensor_cuda ]; then cuda=1; else cpu+=("$n"); fi
  done
  if [ ${#torch_names[@]} -eq 0 ]; then
    cpu=(torch_save_blocking torch_load torch_per_tensor dcp_per_tensor)
    cuda=1
  fi
  if [ ${#cpu[@]} -gt 0 ]; then
    echo
    PYTHONPATH="$build_dir/python" "$python" "$script" "${flags[@]+"${flags[@]}"}" "${cpu[@]}" |
      tee -a "$out" || { status=$?; failed+=(torch_bench); }
  fi
  [ "$cuda" -eq 1 ] || return 0
  echo
  if PYTHONPATH="$build_dir/python" "$python" -c \
    'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    PYTHONPATH="$build_dir/python" "$python" "$script" "${flags[@]+"${flags[@]}"}" \
      torch_per_tensor_cuda | tee -a "$out" || { status=$?; failed+=(torch_bench_cuda); }
    return 0
  fi
  local emulated
  emulated=$(realpath -e "$build_dir/tests/libstrata-emulated-cudart.so" 2>/dev/null) || {
    echo "torch_per_tensor_cuda: no GPU, and no emulated runtime in $build_dir/tests: skipped"
    return 0
  }
  local driver
  driver=$(mktemp -d)
  ln -s "$emulated" "$driver/libcuda.so.1"
  PYTHONPATH="$build_dir/python" STRATA_CUDART=$emulated LD_PRELOAD=$emulated \
    LD_LIBRARY_PATH="$driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" STRATA_EMU_CUDA_DELAY_US=0 \
    "$python" "$script" "${flags[@]+"${flags[@]}"}" torch_per_tensor_cuda |
    tee -a "$out" || { status=$?; failed+=(torch_bench_cuda); }
  rm -rf "$driver"
}

for b in "${runs[@]}"; do
  [ "$b" = torch_bench ] && continue
  if [ ! -x "$build_dir/bench/$b" ]; then
    echo "bench: $build_dir/bench/$b not found (build with STRATA_BENCH=ON)" >&2
    exit 1
  fi
done

# The scratch file system; with STRATA_BENCH_RAMDISK=huge, the RAM disk
# the deployment sets up.
ramdisk=""
cleanup() {
  rm -f "${out:-}"
  if [ -n "$ramdisk" ]; then
    pkill -P $$ 2>/dev/null || true  # a benchmark still running (Ctrl-C, TERM)
    wait 2>/dev/null || true
    umount -l "$ramdisk" && rmdir "$ramdisk"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [ "${STRATA_BENCH_RAMDISK:-}" = huge ]; then
  mnt=$(mktemp -d /run/strata-bench-ramdisk.XXXXXX)
  if ! mount -t tmpfs -o size=16g,huge=within_size,mode=0700 tmpfs "$mnt"; then
    rmdir "$mnt"
    echo "bench: cannot mount a tmpfs with huge=within_size (root and THP needed)" >&2
    exit 1
  fi
  ramdisk=$mnt
  export STRATA_BENCH_TMPFS=$ramdisk
fi
export STRATA_BENCH_TMPFS=${STRATA_BENCH_TMPFS:-/dev/shm}

# Scratch directories left by benchmark runs that were killed.
for d in "$STRATA_BENCH_TMPFS"/strata-bench-*; do
  [ -d "$d" ] || continue
  pid=${d##*-}
  [ -d "/proc/$pid" ] || rm -rf -- "$d"
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "== Strata benchmarks"
echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "machine: $(nproc) CPUs ($cpu), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM"
echo "kernel:  $(uname -srm)"
echo "source:  $(git -C "$(dirname "$0")/.." describe --always --dirty 2>/dev/null || echo unknown)"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min; the figures are noisy when it is high)"
echo "scratch: $STRATA_BENCH_TMPFS ($(findmnt -no FSTYPE,OPTIONS -T "$STRATA_BENCH_TMPFS" 2>/dev/null || echo unknown))"

out=$(mktemp)
status=0
failed=()  # the benchmark programs that exited with an error
for b in "${runs[@]}"; do
  if [ "$b" = engine_bench ]; then
    names=("${engine_names[@]+"${engine_names[@]}"}")
  elif [ "$b" = agent_bench ]; then
    names=("${agent_names[@]+"${agent_names[@]}"}")
  elif [ "$b" = ec_bench ]; then
    names=("${ec_names[@]+"${ec_names[@]}"}")
  elif [ "$b" = coded_bench ]; then
    names=("${coded_names[@]+"${coded_names[@]}"}")
  elif [ "$b" = scale_bench ]; then
    echo
    "$build_dir/bench/scale_bench" --nodes "${STRATA_SCALE_NODES:-100,1000,10000}" |
      tee -a "$out" || { status=$?; failed+=(scale_bench); }
    continue
  elif [ "$b" = cuda_bench ]; then
    echo
    "$build_dir/bench/cuda_bench" --size-mib "${STRATA_CUDA_BENCH_SIZE_MIB:-4096}" \
      --reps "${STRATA_BENCH_REPS:-5}" | tee -a "$out" || { status=$?; failed+=(cuda_bench); }
    continue
  elif [ "$b" = torch_bench ]; then
    run_torch_bench
    continue
  else
    names=("${storage_names[@]+"${storage_names[@]}"}")
  fi
  echo
  "$build_dir/bench/$b" "${flags[@]+"${flags[@]}"}" "${names[@]+"${names[@]}"}" |
    tee -a "$out" || { status=$?; failed+=("$b"); }
done

echo
echo "== Summary"
grep -E '^(ratio|scale) ' "$out" || true
# A benchmark that failed printed no figure: said here, at the end, so
# that its absence from the summary is not taken for a figure left out.
if [ ${#failed[@]} -gt 0 ]; then
  echo
  echo "== FAILED (their errors are above): ${failed[*]}"
fi

# Each figure against the last committed results (bench/results.txt): the
# ones worse by more than their run-to-run spread are listed, and fail the
# run (STRATA_BENCH_COMPARE=0 skips the comparison).
if [ "${STRATA_BENCH_COMPARE:-1}" != 0 ]; then
  echo
  "$(dirname "$0")/bench-compare" "$out" ||
    status=$((status == 0 ? 1 : status))
fi
exit "$status"
