#!/usr/bin/env bash
# The suite's last test: fails if any process started by a test of the build
# tree $1 is still alive. Every test runs with STRATA_TEST_SUITE=$1 in its
# environment and every process it starts inherits it, so a leftover is
# found however it was started (through a wrapper that forks, in a process
# group of its own) and wherever it was re-parented. Leftovers are listed,
# then killed, so that one failing run does not leave the machine busy.
set -u
tag="STRATA_TEST_SUITE=${1:?usage: no_process_left_behind.sh BUILD_DIR}"
left=()
for environ in /proc/[0-9]*/environ; do
  pid=${environ#/proc/}
  pid=${pid%/environ}
  [ "$pid" = "$$" ] && continue
  if { tr '\0' '\n' <"$environ"; } 2>/dev/null | grep -qxF -- "$tag"; then
    left+=("$pid")
  fi
done
if [ ${#left[@]} -eq 0 ]; then
  echo "no process started by the tests of $1 is left"
  exit 0
fi
echo "${#left[@]} process(es) started by the tests of $1 are still alive:"
for pid in "${left[@]}"; do
  printf '  pid %s (parent %s): %s\n' "$pid" "$(awk '/^PPid:/ {print $2}' /proc/$pid/status 2>/dev/null)" \
    "$( { tr '\0' ' ' </proc/$pid/cmdline; } 2>/dev/null | cut -c1-200)"
done
kill -9 "${left[@]}" 2>/dev/null
exit 1
