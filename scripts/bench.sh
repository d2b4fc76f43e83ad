#!/usr/bin/env bash
# Runs the engine benchmarks (bench/engine_bench.cc) and repeats their
# `ratio <name> <value> target <t>` lines as a summary at the end.
#
# Usage: scripts/bench.sh [BUILD_DIR [engine_bench flags and benchmark names]]
# Environment: STRATA_BENCH_SIZE_MIB (state size, default 512),
#              STRATA_BENCH_REPS (timed repetitions, default 9),
#              STRATA_BENCH_TMPFS (scratch parent, default /dev/shm).
set -euo pipefail

build_dir=${1:-build}
[ $# -gt 0 ] && shift
bin="$build_dir/bench/engine_bench"
if [ ! -x "$bin" ]; then
  echo "bench: $bin not found (build with STRATA_BENCH=ON)" >&2
  exit 1
fi

# Scratch directories left by benchmark runs that were killed.
for d in "${STRATA_BENCH_TMPFS:-/dev/shm}"/strata-bench-*; do
  [ -d "$d" ] || continue
  pid=${d##*-}
  [ -d "/proc/$pid" ] || rm -rf -- "$d"
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "== Strata engine benchmarks"
echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "machine: $(nproc) CPUs ($cpu), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM"
echo "kernel:  $(uname -srm)"
echo "source:  $(git -C "$(dirname "$0")/.." describe --always --dirty 2>/dev/null || echo unknown)"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min; the figures are noisy when it is high)"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
"$bin" "$@" | tee "$out" || status=$?

echo
echo "== Summary"
grep '^ratio ' "$out" || true
exit "$status"
