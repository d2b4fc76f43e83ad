#!/usr/bin/env python3
"""make demo: a 4-node training job on loopback survives four scripted events.

Each node has a `strata agent` (its RAM disk is a directory under /dev/shm)
and a `strata run` supervisor that restarts the toy trainer. The job backs up
to a file:// directory in the demo's temporary directory (DEMO_BACKUP=s3://...
uses S3 instead, with the usual AWS_* variables). The script then:

  1. delivers a maintenance notice to node 1 (`strata maintenance`): every
     rank saves the same on-demand step, the job restarts from its own RAM;
  2. takes node 2 for maintenance that wipes its RAM (`--lose-ram`): the
     agent holds the node until its on-demand step is on its peer;
  3. loses nodes 1 and 2 abruptly (kill -9, RAM wiped): restored from peers;
  4. loses the whole cluster: restored from the backup;

and prints, for each, what was saved, where every node restored from, how
many steps were lost and how long recovery took. It ends by comparing every
node's final digest with an uninterrupted run. Everything it starts is
stopped, and its directory removed, on exit and on Ctrl-C (DEMO_KEEP=1 keeps the directory and its logs).

Only the Python standard library is used.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
STRATA = os.path.join(BUILD, "strata")
TRAINER = os.path.join(BUILD, "toy-trainer")
NODES = 4
STEPS = int(os.environ.get("DEMO_STEPS", "1800"))
STATE_MB = int(os.environ.get("DEMO_STATE_MB", "16"))
STEP_MS = int(os.environ.get("DEMO_STEP_MS", "15"))
INTERVAL = int(os.environ.get("DEMO_INTERVAL", "50"))  # periodic checkpoints
BACKUP_EVERY = int(os.environ.get("DEMO_BACKUP_EVERY", "100"))
TTY = sys.stdout.isatty()

work = tempfile.mkdtemp(prefix="strata-demo.", dir="/dev/shm")
BACKUP = os.environ.get("DEMO_BACKUP") or "file://" + os.path.join(work, "backup")
SECRET = os.path.join(work, "secret")


def free_ports(n):
    """n consecutive free loopback ports below the kernel's ephemeral range (so
    no outgoing connection can take one between now and the agents' bind)."""
    import socket
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        first = 10000 + int.from_bytes(os.urandom(2), "little") % max(1, low - 10000 - n)
        try:
            for p in range(first, first + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return first
        except OSError:
            continue
    raise SystemExit("demo: no %d free consecutive ports below %d" % (n, low))


PORT0 = free_ports(4)
children = []  # every Popen we started, each in its own session


def bold(s):
    return "\033[1m" + s + "\033[0m" if TTY else s


def say(s):
    clear_progress()
    print(bold("== " + s), flush=True)


def note(s):
    clear_progress()
    print("   " + s, flush=True)


def spawn(argv, log):
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    children.append(p)
    return p


def cleanup():
    for p in children:  # supervisors forward SIGTERM; agents stop at once on SIGINT
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGINT if "agent" in p.args else signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.time() + 5
    while time.time() < deadline and any(p.poll() is None for p in children):
        time.sleep(0.1)
    for pid in trainer_pids(None):
        kill(pid)
    for p in children:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    if os.environ.get("DEMO_KEEP"):
        print("demo: kept " + work)
    else:
        shutil.rmtree(work, ignore_errors=True)


def on_signal(sig, _frame):
    clear_progress()
    print("\ndemo: interrupted; stopping everything it started", flush=True)
    cleanup()
    sys.exit(130)


def kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def trainer_pids(node):
    """Pids of the demo's trainers (of one node, or all with None)."""
    want = os.path.join(work, "node%d" % node if node is not None else "node")
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"toy-trainer") and b"--dir" in argv:
            dir_ = argv[argv.index(b"--dir") + 1].decode()
            if dir_.startswith(want) and (node is None or dir_ == want):
                out.append(int(d))
    return out


# --- the cluster --------------------------------------------------------------------------------

agents = {}
supervisors = {}


def node_dir(n):
    return os.path.join(work, "node%d" % n)


def address(n):
    return "127.0.0.1:%d" % (PORT0 + n)


agent_log_start = {}


def start_agent(n):
    path = os.path.join(work, "agent%d.log" % n)
    agent_log_start[n] = os.path.getsize(path) if os.path.exists(path) else 0
    log = open(path, "ab")
    agents[n] = spawn([STRATA, "agent", "--local-dir", node_dir(n), "--listen", address(n),
                       "--coordinator", address(0), "--secret-file", SECRET, "--backup", BACKUP,
                       "--grace-seconds", "60"], log)


def wait_listening(n):
    log = os.path.join(work, "agent%d.log" % n)
    for _ in range(100):
        with open(log, "rb") as f:
            f.seek(agent_log_start[n])
            if b"listening on" in f.read():
                return
        if agents[n].poll() is not None:
            raise SystemExit("demo: the agent of node %d exited" % n)
        time.sleep(0.05)
    raise SystemExit("demo: the agent of node %d did not start" % n)


def run_log(n):
    return os.path.join(work, "run%d.log" % n)


def start_supervisor(n):
    log = open(run_log(n), "ab")
    supervisors[n] = spawn([STRATA, "run", "--backoff", "200ms,2s", "--grace", "60s", "--",
                            TRAINER, "--dir", node_dir(n), "--steps", str(STEPS),
                            "--save-interval-steps", str(INTERVAL), "--state-mb", str(STATE_MB),
                            "--step-ms", str(STEP_MS), "--seed", str(100 + n),
                            "--replicator", "orbax", "--job", "demo", "--node-rank", str(n),
                            "--nodes", str(NODES), "--peers-per-node", "1",
                            "--backup-interval-steps", str(BACKUP_EVERY),
                            "--exit-after-ondemand"], log)


def strata(*args, timeout=120):
    r = subprocess.run([STRATA, *args], capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, STRATA_SECRET_FILE=SECRET))
    return r.returncode, r.stdout + r.stderr


def status(n):
    try:
        rc, out = strata("status", "--agent", address(n), "--json", timeout=5)
        return json.loads(out) if rc == 0 else {}
    except (subprocess.TimeoutExpired, ValueError):
        return {}


# --- progress -----------------------------------------------------------------------------------

last_steps = {}
_progress_shown = False
_last_plain = 0.0


def clear_progress():
    global _progress_shown
    if _progress_shown:
        sys.stdout.write("\r\033[K")
        _progress_shown = False


def show_progress():
    """A step counter per node: one live line on a terminal, a line every 3 s otherwise."""
    global _progress_shown, _last_plain
    cells = []
    for n in range(NODES):
        step = status(n).get("training_step", -1)
        if step >= 0:
            last_steps[n] = step
        cells.append("node %d %5s" % (n, step if step >= 0 else "-"))
    line = "   steps: " + "   ".join(cells)
    if TTY:
        sys.stdout.write("\r\033[K" + line)
        sys.stdout.flush()
        _progress_shown = True
    elif time.time() - _last_plain > 3:
        print(line, flush=True)
        _last_plain = time.time()


def current_steps():
    """Every node's training step now (for "steps lost": the step the job had reached)."""
    steps = {n: status(n).get("training_step", -1) for n in range(NODES)}
    return {n: s for n, s in steps.items() if s >= 0}


def train_for(seconds):
    end = time.time() + seconds
    while time.time() < end:
        show_progress()
        time.sleep(0.3)


def log_offsets():
    return {n: os.path.getsize(run_log(n)) if os.path.exists(run_log(n)) else 0
            for n in range(NODES)}


def new_log_text(n, offsets):
    with open(run_log(n), "rb") as f:
        f.seek(offsets.get(n, 0))
        return f.read().decode(errors="replace")


def wait_restored(offsets, t0, limit=120):
    """Waits until every node's trainer has restored after `offsets`; returns
    {node: (step, source, seconds)}."""
    done = {}
    deadline = time.time() + limit
    while len(done) < NODES:
        if time.time() > deadline:
            raise SystemExit("demo: nodes %s did not restore within %d s" %
                             (sorted(set(range(NODES)) - set(done)), limit))
        for n in range(NODES):
            if n in done:
                continue
            m = re.search(r"restored step=(\d+)", new_log_text(n, offsets))
            if m:
                done[n] = (int(m.group(1)), restore_source(n), time.time() - t0)
        show_progress()
        time.sleep(0.1)
    return done


def restore_source(n):
    text = status(n).get("last_restore", "")
    if " from node " in text:
        return "peer (node %s)" % text.rsplit(" from node ", 1)[1]
    if " from backup " in text:
        return "backup"
    if "own store" in text:
        return "own RAM"
    return text or "?"


def ondemand_steps(offsets):
    steps = set()
    for n in range(NODES):
        steps.update(re.findall(r"ondemand checkpoint step=(\d+)", new_log_text(n, offsets)))
    return steps


# --- events -------------------------------------------------------------------------------------

results = []


def record(name, saved, restored, before):
    steps = sorted({s for s, _, _ in restored.values()})
    lost = max(0, max(before.values(), default=0) - min(steps))
    seconds = max(t for _, _, t in restored.values())
    sources = [restored[n][1] for n in range(NODES)]
    for n in range(NODES):
        note("node %d resumed at step %d from %s" % (n, restored[n][0], restored[n][1]))
    note("%d step(s) of training lost; every node training again %.1f s after the event"
         % (lost, seconds))
    results.append((name, saved, sources, lost, seconds))


def maintenance(node, lose_ram):
    offsets, before, t0 = log_offsets(), current_steps(), time.time()
    # As on the node: its agent's local socket (--lose-ram is served only there).
    args = ["maintenance", "--agent", os.path.join(node_dir(node), ".strata-agent", "agent.sock"),
            "--grace", "60s"]
    rc, out = strata(*(args + (["--lose-ram"] if lose_ram else [])))
    for line in out.strip().splitlines():
        note("| " + line)
    if rc != 0:
        raise SystemExit("demo: strata maintenance failed")
    saved = ondemand_steps(offsets)
    note("on-demand checkpoint: step %s on every rank" % ", ".join(sorted(saved)))
    restored = wait_restored(offsets, t0)
    return "on-demand step " + "/".join(sorted(saved)), restored, before


def lose_nodes(lost):
    """Nodes in `lost` vanish (agent, supervisor, trainer, RAM); the job's other
    ranks crash with them, and their supervisors restart them."""
    offsets, before, t0 = log_offsets(), current_steps(), time.time()
    newest = {n: status(n).get("newest_replicated", -1) for n in range(NODES)}
    backup = status(0).get("backup", {}).get("newest", {})
    for n in lost:
        for p in (supervisors[n], agents[n]):
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for pid in trainer_pids(n):
            kill(pid)
        shutil.rmtree(node_dir(n), ignore_errors=True)
    for n in set(range(NODES)) - set(lost):
        for pid in trainer_pids(n):
            kill(pid)  # a collective with a dead rank fails: the job crashes
    note("lost: node(s) %s (kill -9, RAM wiped); the other ranks crashed with them"
         % ", ".join(map(str, lost)))
    note("newest step on every peer: %d; newest backup: %s" %
         (min(newest.values()), "step %s (%s)" % (backup.get("step"), backup.get("id"))
          if backup else "none"))
    for n in lost:  # replacement machines, empty
        start_agent(n)
    for n in lost:
        wait_listening(n)
        start_supervisor(n)
    restored = wait_restored(offsets, t0)
    return "step %d" % max(s for s, _, _ in restored.values()), restored, before


def wait_backup_of(step, limit=60):
    deadline = time.time() + limit
    while time.time() < deadline:
        newest = status(0).get("backup", {}).get("newest", {})
        if newest.get("step", -1) >= step:
            return newest
        show_progress()
        time.sleep(0.3)
    return {}


def main():
    for tool in (STRATA, TRAINER):
        if not os.access(tool, os.X_OK):
            raise SystemExit("demo: %s is missing; run `make build` first" % tool)
    with open(SECRET, "w") as f:
        f.write("demo-secret-%d-%s\n" % (os.getpid(), os.urandom(8).hex()))
    os.chmod(SECRET, 0o600)
    # Uninterrupted reference runs, in the background, for the final comparison.
    refs = {n: subprocess.Popen([TRAINER, "--dir", os.path.join(work, "ref%d" % n), "--steps",
                                 str(STEPS), "--state-mb", str(STATE_MB), "--seed", str(100 + n),
                                 "--max-to-keep", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                start_new_session=True)
            for n in range(NODES)}
    children.extend(refs.values())

    say("A 4-node job on loopback: agents on %s..%d, supervisors, %d MiB of state per node, "
        "a checkpoint every %d steps, a backup every %d steps to %s"
        % (address(0), PORT0 + NODES - 1, STATE_MB, INTERVAL, BACKUP_EVERY, BACKUP))
    start = time.time()
    for n in range(NODES):
        start_agent(n)
    for n in range(NODES):
        wait_listening(n)
    for n in range(NODES):
        start_supervisor(n)
    train_for(5)

    say("1. A maintenance notice reaches node 1 (strata maintenance --node 1)")
    saved, restored, before = maintenance(1, lose_ram=False)
    record("maintenance notice, node 1", saved, restored, before)
    train_for(4)

    say("2. Node 2 goes for maintenance and comes back without its RAM (--lose-ram)")
    saved, restored, before = maintenance(2, lose_ram=True)
    record("node 2 back without its RAM", saved, restored, before)
    train_for(4)

    say("3. Nodes 1 and 2 are lost abruptly, with their RAM; replacements start empty")
    saved, restored, before = lose_nodes([1, 2])
    record("nodes 1 and 2 lost", "periodic " + saved, restored, before)
    train_for(2)
    target = max(last_steps.values()) // BACKUP_EVERY * BACKUP_EVERY
    wait_backup_of(target)

    say("4. The whole cluster is lost: every node, every RAM disk; only the backup is left")
    rc, out = strata("backups", "ls", BACKUP)
    for line in out.strip().splitlines()[-4:]:
        note("| " + line)
    saved, restored, before = lose_nodes(list(range(NODES)))
    record("whole cluster lost", "backup of " + saved, restored, before)

    say("The job finishes")
    for n in range(NODES):
        while supervisors[n].poll() is None:
            show_progress()
            time.sleep(0.3)
    clear_progress()
    took = time.time() - start
    ok = True
    rows = []
    for n in range(NODES):
        got = re.findall(r"final step=\d+ digest=(\w+)", new_log_text(n, {}))
        ref_out, _ = refs[n].communicate()
        want = re.findall(r"digest=(\w+)", ref_out)
        match = bool(got) and bool(want) and got[-1] == want[-1]
        ok &= match and supervisors[n].returncode == 0
        rows.append((n, got[-1] if got else "-", want[-1] if want else "-", match))

    say("Summary (%d steps per node, %.0f s)" % (STEPS, took))
    print("   %-30s %-26s %-44s %5s %9s" % ("event", "saved", "restored from (node 0..3)",
                                          "lost", "recovery"))
    for name, saved, sources, lost, seconds in results:
        short = ", ".join(s.replace("peer (node ", "peer:").replace(")", "") for s in sources)
        print("   %-30s %-26s %-44s %5d %8.1fs" % (name, saved, short, lost, seconds))
    print()
    print("   %-6s %-18s %-18s" % ("node", "final digest", "uninterrupted run"))
    for n, got, want, match in rows:
        verdict = "MATCH" if match else "MISMATCH"
        if TTY:
            verdict = ("\033[32m" if match else "\033[31m") + verdict + "\033[0m"
        print("   %-6d %-18s %-18s %s" % (n, got, want, verdict))
    if not ok:
        raise SystemExit("demo: a digest does not match")
    print("   every node ended bit for bit where an uninterrupted run ends")
    show_goodput()


def show_goodput():
    """`strata goodput` over every node's agent: where the job's time went
    (each agent counts from the job's first start it saw; a node lost in
    the demo counts from its return)."""
    say("Goodput (strata goodput)")
    agents = ",".join(address(n) for n in range(NODES))
    rc, out = strata("goodput", "--agent", agents, timeout=30)
    for line in out.rstrip().splitlines():
        print("   " + line)
    if rc != 0:
        raise SystemExit("demo: strata goodput failed")
    note("each agent counts from the first start of the job it saw; the agents here "
         "started again with the cluster, so this is the job since then")


def show_logs():
    """The end of every log, for a run that failed (the directory goes away)."""
    for name in sorted(os.listdir(work)):
        if name.endswith(".log"):
            with open(os.path.join(work, name), errors="replace") as f:
                lines = f.readlines()[-15:]
            print("--- %s (last %d lines)" % (name, len(lines)))
            sys.stdout.writelines(lines)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        main()
    except SystemExit as e:
        if e.code not in (0, None, 130):
            clear_progress()
            show_logs()
        raise
    finally:
        cleanup()
