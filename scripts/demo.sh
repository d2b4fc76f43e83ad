#!/usr/bin/env bash
# make demo: the toy trainer survives a maintenance notice (SIGTERM) and a
# kill -9, resumes from its newest checkpoint each time, and ends bit for bit
# where an uninterrupted run ends. Cleans up after itself, also on Ctrl-C.
set -euo pipefail
BUILD=${1:-build}
STRATA=$BUILD/strata
TRAINER=$BUILD/toy-trainer
STEPS=${DEMO_STEPS:-400}
STATE_MB=${DEMO_STATE_MB:-64}
STEP_MS=${DEMO_STEP_MS:-10}
INTERVAL=${DEMO_INTERVAL:-50}

work=$(mktemp -d /dev/shm/strata-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted, cleaned up"; exit 130' INT TERM

say() { printf '\033[1m== %s\033[0m\n' "$*"; }
now_ms() { date +%s%3N; }
trainer_args() { # DIR STEPS [flags...]: the trainer's command line in $args
  local dir=$1 steps=$2; shift 2
  args=("$TRAINER" --dir "$dir" --steps "$steps" --state-mb "$STATE_MB" --step-ms "$STEP_MS"
        --save-interval-steps "$INTERVAL" "$@")
}
trainer() { trainer_args "$@"; "${args[@]}"; }
# Starts the trainer in the background ($child is its pid), its output
# prefixed on the terminal and kept in $work/log.
start_trainer() {
  trainer_args "$@"
  "${args[@]}" > >(tee -a "$work/log" | sed 's/^/   trainer: /') 2>&1 &
  child=$!
  pids+=("$child")
}

say "Reference: an uninterrupted run of $STEPS steps ($STATE_MB MiB of state, checkpoint every $INTERVAL steps)"
ref=$(trainer "$work/reference" "$STEPS" | awk -F'digest=' '/final/ {print $2}')
echo "   reference digest: $ref"

dir=$work/node0
say "1. Training; a maintenance notice (SIGTERM) arrives after 1.5 s"
start_trainer "$dir" "$STEPS" --exit-after-ondemand
sleep 1.5
t0=$(now_ms)
kill -TERM "$child"
wait "$child" || true
t1=$(now_ms)
ondemand=$(awk -F= '/ondemand checkpoint/ {print $2}' "$work/log" | tail -1)
echo "   on-demand checkpoint at step $ondemand (not a multiple of $INTERVAL); exited $((t1 - t0)) ms after the notice"
"$STRATA" ls "$dir" | sed 's/^/   /'

say "2. Restart; the trainer is killed with SIGKILL after 2.5 s, mid-run"
: > "$work/log"
start_trainer "$dir" "$STEPS"
sleep 2.5
kill -9 "$child"
wait "$child" 2>/dev/null || true
echo "   killed. What is on disk now:"
"$STRATA" ls "$dir" | sed 's/^/   /'
"$STRATA" verify "$dir" | sed 's/^/   /'

say "3. Restart; the trainer resumes from the newest verified step and finishes"
: > "$work/log"
start_trainer "$dir" "$STEPS"
wait "$child"
restored=$(awk -F= '/restored step/ {print $2}' "$work/log")
final=$(awk -F'digest=' '/final/ {print $2}' "$work/log")

say "Summary"
printf '   %-34s %s\n' "on-demand checkpoint (SIGTERM)" "step $ondemand"
printf '   %-34s %s\n' "restored after kill -9" "step $restored"
printf '   %-34s %s\n' "final digest (interrupted run)" "$final"
printf '   %-34s %s\n' "final digest (uninterrupted run)" "$ref"
if [ "$final" = "$ref" ]; then
  printf '   \033[32mMATCH\033[0m: the interrupted run ended bit for bit where the uninterrupted one did\n'
else
  printf '   \033[31mMISMATCH\033[0m\n'
  exit 1
fi
