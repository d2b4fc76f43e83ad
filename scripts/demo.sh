#!/usr/bin/env bash
# make demo: the toy trainer survives a maintenance notice (SIGTERM) and a
# kill -9, resumes from its newest checkpoint each time, and ends bit for bit
# where an uninterrupted run ends; then four nodes with their agents lose one
# node with its RAM disk, and its agent restores it from its peer; finally
# the whole cluster is lost and restored from the backup. Cleans up after
# itself, also on Ctrl-C.
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
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.2
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
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
wait "$child" || true  # exits 75: stopped after its on-demand checkpoint
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

say "Single node: summary"
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

# ---------------------------------------------------------------------------
# Four nodes with their agents on loopback: a node is lost with its RAM disk
# and comes back empty; its agent restores it from its peer.
NODES=4
CSTEPS=${DEMO_CLUSTER_STEPS:-60}
CMB=${DEMO_CLUSTER_STATE_MB:-16}
echo "demo-secret-$$-0123456789" > "$work/secret"
export STRATA_SECRET_FILE=$work/secret
port0=$((20000 + RANDOM % 20000))
agent_pids=()
BACKUP=file://$work/backup
start_agent() { # NODE
  "$STRATA" agent --local-dir "$work/node$1" --listen "127.0.0.1:$((port0 + $1))" \
    --coordinator "127.0.0.1:$port0" --secret-file "$work/secret" --backup "$BACKUP" \
    2>>"$work/agent$1.log" &
  agent_pids[$1]=$!
  pids+=("$!")
}
run_cluster() { # STEPS: one trainer per node, in parallel; prints a line per node
  local steps=$1 t0 t1; local tp=()
  t0=$(now_ms)
  for n in $(seq 0 $((NODES - 1))); do
    "$TRAINER" --dir "$work/node$n" --steps "$steps" --save-interval-steps 10 --state-mb "$CMB" \
      --step-ms 5 --seed $((100 + n)) --replicator orbax --job demo --node-rank "$n" \
      --nodes "$NODES" --peers-per-node 1 --backup-interval-steps 20 >"$work/trainer$n.log" 2>&1 &
    tp+=($!); pids+=("$!")
  done
  for n in $(seq 0 $((NODES - 1))); do wait "${tp[$n]}"; done
  t1=$(now_ms)
  for n in $(seq 0 $((NODES - 1))); do
    printf '   node %d: %-18s %s\n' "$n" "$(grep -E 'fresh start|restored' "$work/trainer$n.log")" \
      "$(grep final "$work/trainer$n.log")"
  done
  echo "   ($((t1 - t0)) ms for all four, including the restore)"
  sleep 1.5  # let the agents replicate the last steps
}

say "Four nodes: agents on 127.0.0.1:$port0..$((port0 + 3)), each node's copies on the node two ranks away, a backup every 20 steps to $BACKUP"
for n in 0 1 2 3; do start_agent "$n"; done
sleep 0.5
run_cluster 40
"$STRATA" status --agent "127.0.0.1:$((port0 + 2))" | sed 's/^/   /'

say "Node 2 is lost with its RAM disk; a new machine takes its place with an empty directory"
{ kill -9 "${agent_pids[2]}"; wait "${agent_pids[2]}"; } 2>/dev/null || true
rm -rf "$work/node2"
start_agent 2
sleep 0.5
run_cluster "$CSTEPS"
grep -h "restored job1\|restored demo" "$work/agent2.log" | sed 's/.*strata: /   agent 2: /'

say "The whole cluster is lost: every agent killed, every RAM disk wiped; only the backup remains"
for _ in 1 2 3 4 5 6 7 8 9 10; do  # the backup of step $CSTEPS may still be uploading
  "$STRATA" backups ls "$BACKUP" | grep -q " $CSTEPS .*complete$" && break
  sleep 0.5
done
"$STRATA" backups ls "$BACKUP" | sed 's/^/   /'
for n in 0 1 2 3; do { kill -9 "${agent_pids[$n]}"; wait "${agent_pids[$n]}"; } 2>/dev/null || true; done
for n in 0 1 2 3; do rm -rf "$work/node$n"; done
for n in 0 1 2 3; do start_agent "$n"; done
sleep 0.5
FINAL=$((CSTEPS + 20))
run_cluster "$FINAL"
grep -h "restored demo" "$work/agent0.log" | tail -1 | sed 's/.*strata: /   agent 0: /'
"$STRATA" status --agent "127.0.0.1:$port0" | grep -A1 "^backup" | sed 's/^/   /'
echo "   Retention (dry run: deletes nothing):"
"$STRATA" prune "$BACKUP" --hourly 1 | sed 's/^/     /'

say "Four nodes: digests against uninterrupted runs"
ok=1
for n in 0 1 2 3; do
  want=$("$TRAINER" --dir "$work/ref$n" --steps "$FINAL" --state-mb "$CMB" --seed $((100 + n)) |
         awk -F'digest=' '/final/ {print $2}')
  got=$(awk -F'digest=' '/final/ {print $2}' "$work/trainer$n.log")
  [ "$got" = "$want" ] && verdict="\033[32mMATCH\033[0m" || { verdict="\033[31mMISMATCH\033[0m"; ok=0; }
  printf "   node %d  %s  %s  $verdict\n" "$n" "$got" "$want"
done
[ $ok = 1 ] || exit 1
