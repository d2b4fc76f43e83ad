#!/usr/bin/env bash
# Runs the libFuzzer targets built in FUZZ_DIR (make fuzz) for SECONDS each
# and prints, per target, what docs/reliability.md reports: executions,
# coverage (edges), corpus size, time and findings.
#
# Usage: scripts/fuzz.sh FUZZ_DIR SECONDS [TARGET...]   (default: all)
# Each target starts from fuzz/corpus/<target> (the stored seeds and
# regressions; never written here) and FUZZ_DIR/corpus/<target> (what
# earlier runs found; new inputs go there). A crash, leak, timeout or
# out-of-memory leaves the input in FUZZ_DIR/artifacts/ and the script exits
# 1 after running the rest; add such an input to fuzz/corpus/<target> with
# its fix, so every build's tests replay it.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${1:?FUZZ_DIR}
seconds=${2:?SECONDS}
shift 2
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(wire manifest config backup frame s3 state)
mkdir -p "$dir/artifacts" "$dir/logs"
status=0
rows=()
for t in "${targets[@]}"; do
  bin="$dir/fuzz/fuzz_$t"
  [ -x "$bin" ] || { echo "fuzz: no $bin (make fuzz builds it)" >&2; exit 2; }
  mkdir -p "$dir/corpus/$t"
  log="$dir/logs/$t.log"
  echo "== fuzz_$t for ${seconds}s"
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/artifacts/$t-" "$dir/corpus/$t" "fuzz/corpus/$t" > "$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  corpus=$(ls "$dir/corpus/$t" | wc -l)
  found=$(ls "$dir/artifacts" | grep -c "^$t-" || true)
  if [ $rc -ne 0 ]; then
    status=1
    grep -m3 -E 'ERROR: |SUMMARY: |==[0-9]+==' "$log" | sed 's/^/  /'
  fi
  rows+=("$(printf '%-9s %8ss %12s %7s %8s %9s' "$t" "$seconds" "${execs:-?}" "${cov:-?}" \
    "$corpus" "$found")")
done
echo
printf '%-9s %9s %12s %7s %8s %9s\n' target time execs edges corpus artifacts
printf '%s\n' "${rows[@]}"
exit $status
