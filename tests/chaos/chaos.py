#!/usr/bin/env python3
"""make chaos: a real job on a multi-host test bed under seeded random faults.

For each seed: a job of --nodes nodes, each a host of its own on the bed
(netbed.py) running `strata agent` and `strata run` with the deterministic
toy trainer, backing up to a file:// store; the seed's schedule (schedule.py)
is printed and applied; when it is over every fault is healed and the job
runs to its end. Then the invariants are checked, and a run that breaks one
fails naming the first violation and the seed:

  * every rank's final state equals an uninterrupted run's, bit for bit (so
    no corrupt byte was restored and no step skipped or repeated wrongly);
  * every supervisor finished with exit 0;
  * every restore restored a step every node restored (the job restores as
    a whole, never a step incomplete for it);
  * the work lost at each fault that restarted the job is within what the
    tiers held: the save interval (plus the save in flight), or the backup
    interval when more than one node is away without its RAM;
  * no committed backup was modified or deleted;
  * no agent crashed (only the harness's kill -9 ends one) and none logged
    an abort;
  * no process was left behind.

The figures (faults by kind, overlaps, work lost, recovery times) are
printed per run and summed over the seeds, and with --json written to a
file. Needs root. Only the Python standard library is used.

  chaos.py BUILD --seeds 20 --minutes 2 [--nodes 4] [--kinds partition,kill_agent]
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netbed  # noqa: E402
import schedule  # noqa: E402

# The fault kinds this runner applies so far; the others of schedule.KINDS
# need an S3 host and a fault proxy, a small RAM disk per node, or a
# crashing trainer, and are refused until they are built.
SUPPORTED = ["kill_trainer", "kill_agent", "kill_coordinator", "kill_supervisor", "lose_node",
             "partition", "slow_link", "maintenance", "maintenance_lose_ram"]
# Faults after which the job restarts (and restores).
RESTARTS = {"kill_trainer", "kill_supervisor", "lose_node", "maintenance", "maintenance_lose_ram"}

PORT = 7070
MEAN_GAP = 10.0      # seconds between faults, on average
STEP_MS = 20
STATE_MB = 4
INTERVAL = 25        # a periodic checkpoint every INTERVAL steps
BACKUP_EVERY = 100   # a backup every BACKUP_EVERY steps
ABORT_SIGNS = ("AddressSanitizer", "terminate called", "Segmentation fault", "Assertion",
               "core dumped", "Aborted")


class Violation(Exception):
    pass


class Job:
    """One job on the bed: an agent and a supervised trainer per node."""

    def __init__(self, bed, build, work, nodes, steps):
        self.bed, self.work, self.nodes, self.steps = bed, work, nodes, steps
        self.strata = os.path.join(build, "strata")
        self.trainer = os.path.join(build, "toy-trainer")
        self.secret = os.path.join(work, "secret")
        with open(self.secret, "w") as f:
            f.write("chaos-%d-%s\n" % (os.getpid(), os.urandom(8).hex()))
        os.chmod(self.secret, 0o600)
        self.backup = os.path.join(work, "backup")
        self.agents, self.supervisors = {}, {}
        self.killed_agents = set()  # pids the harness killed on purpose

    def host(self, n):
        return "n%d" % n

    def address(self, n):
        return "%s:%d" % (self.bed.address(self.host(n)), PORT)

    def dir(self, n):
        return os.path.join(self.work, "node%d" % n)

    def log(self, what, n):
        return os.path.join(self.work, "%s%d.log" % (what, n))

    def start_agent(self, n):
        os.makedirs(self.dir(n), exist_ok=True)
        self.agents[n] = self.bed.spawn(self.host(n), [
            self.strata, "agent", "--local-dir", self.dir(n), "--listen", self.address(n),
            "--coordinator", self.address(0), "--secret-file", self.secret,
            "--backup", "file://" + self.backup, "--grace-seconds", "60"], log=self.log("agent", n))

    def start_supervisor(self, n):
        self.supervisors[n] = self.bed.spawn(self.host(n), [
            self.strata, "run", "--backoff", "200ms,2s", "--grace", "60s", "--",
            self.trainer, "--dir", self.dir(n), "--steps", str(self.steps),
            "--save-interval-steps", str(INTERVAL), "--state-mb", str(STATE_MB),
            "--step-ms", str(STEP_MS), "--seed", str(100 + n), "--replicator", "orbax",
            "--job", "chaos", "--node-rank", str(n), "--nodes", str(self.nodes),
            "--peers-per-node", "1", "--backup-interval-steps", str(BACKUP_EVERY),
            "--exit-after-ondemand"], log=self.log("run", n))

    def wait_listening(self, n, limit=30):
        if not netbed.wait_for(lambda: b"listening on" in _tail(self.log("agent", n)), limit):
            raise Violation("the agent of node %d did not start" % n)

    def trainer_pids(self, n):
        return _pids_with_arg(self.dir(n), self.trainer)

    def kill_trainers(self, nodes):
        for n in nodes:
            for pid in self.trainer_pids(n):
                _kill(pid)

    def kill_agent(self, n):
        p = self.agents.get(n)
        if p and p.poll() is None:
            self.killed_agents.add(p.pid)
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    def kill_supervisor(self, n):
        p = self.supervisors.get(n)
        if p and p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)  # the pod goes: the trainer with it
            p.wait()
        self.kill_trainers([n])

    def status(self, n):
        """`strata status` of node n, or {} (unreachable: partitioned, away)."""
        try:
            r = subprocess.run([self.strata, "status", "--agent", self.address(n), "--json"],
                               capture_output=True, text=True, timeout=3,
                               env=dict(os.environ, STRATA_SECRET_FILE=self.secret))
            return json.loads(r.stdout) if r.returncode == 0 else {}
        except (subprocess.TimeoutExpired, ValueError):
            return {}

    def training_step(self):
        steps = [self.status(n).get("training_step", -1) for n in range(self.nodes)]
        return max(steps, default=-1)

    def restores(self):
        """Every node's restored steps so far, in order, per node."""
        out = {}
        for n in range(self.nodes):
            text = _tail(self.log("run", n)).decode(errors="replace")
            out[n] = [int(s) for s in re.findall(r"restored step=(\d+)", text)]
        return out

    def finished(self):
        return all(p.poll() is not None for p in self.supervisors.values())


def _tail(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _pids_with_arg(arg, exe=None):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if arg.encode() in argv and (exe is None or argv[0].decode(errors="replace") == exe):
            out.append(int(d))
    return out


class Collective:
    """The job's ranks fail together, as a collective with a missing rank
    fails: when a trainer ends other than by finishing the job (killed, an
    on-demand checkpoint taken alone, a crash), the trainers that ran
    alongside it are killed and their supervisors restart them. Trainers
    started since the last look are spared: they belong to the next start."""

    def __init__(self, job):
        self.job = job
        self.seen = {}  # pid -> node, at the last look

    def look(self):
        job = self.job
        now = {pid: n for n in range(job.nodes) for pid in job.trainer_pids(n)}
        ended = [n for pid, n in self.seen.items() if pid not in now]
        failed = [n for n in ended if b"final step=" not in _tail(job.log("run", n))]
        if failed:
            for pid in self.seen:
                if pid in now:
                    _kill(pid)
                    del now[pid]
        self.seen = now
        return failed


class Faults:
    """Applies a schedule's faults to a job; records what each did."""

    def __init__(self, job, log):
        self.job, self.bed, self.say = job, job.bed, log
        self.records = []  # one dict per fault applied
        self.heals = []    # (time, fn, what)
        self.away = set()  # nodes whose host is down (lose_node)
        self.threads = []

    def apply(self, fault, t0):
        job = self.job
        record = {"kind": fault.kind, "nodes": list(fault.nodes), "at": fault.at}
        if fault.kind in RESTARTS:  # what the work lost is measured against
            record["before"] = job.training_step()
            record["restores"] = job.restores()
        k, nodes = fault.kind, list(fault.nodes)
        if any(n in self.away for n in nodes) or (k == "kill_coordinator" and 0 in self.away):
            record["skipped"] = "the node is away"
        elif k == "kill_trainer":
            job.kill_trainers(nodes)
            job.kill_trainers(range(job.nodes))  # a collective with a dead rank fails
        elif k == "kill_supervisor":
            job.kill_supervisor(nodes[0])
            job.kill_trainers(range(job.nodes))
            job.start_supervisor(nodes[0])
        elif k in ("kill_agent", "kill_coordinator"):
            n = 0 if k == "kill_coordinator" else nodes[0]
            job.kill_agent(n)
            time.sleep(1)  # the service manager restarts it
            job.start_agent(n)
        elif k == "lose_node":
            n = nodes[0]
            job.kill_supervisor(n)
            job.kill_agent(n)
            shutil.rmtree(job.dir(n), ignore_errors=True)
            job.kill_trainers(range(job.nodes))
            self.away.add(n)
            self.heals.append((time.time() + fault.seconds, lambda: self._return(n),
                               "node %d back, empty" % n))
        elif k == "partition":
            self.bed.partition([job.host(n) for n in nodes])
            self.heals.append((time.time() + fault.seconds, self.bed.heal, "partition healed"))
        elif k == "slow_link":
            host = job.host(nodes[0])
            self.bed.slow(host, "10mbit")
            self.heals.append((time.time() + fault.seconds, lambda: self.bed.unslow(host),
                               "link of node %d back to speed" % nodes[0]))
        elif k.startswith("maintenance"):
            argv = [job.strata, "maintenance", "--agent", job.address(nodes[0]), "--grace", "60s"]
            if k == "maintenance_lose_ram":
                argv.append("--lose-ram")
            t = threading.Thread(target=subprocess.run, args=(argv,), daemon=True,
                                 kwargs={"capture_output": True, "timeout": 180,
                                         "env": dict(os.environ, STRATA_SECRET_FILE=job.secret)})
            t.start()
            self.threads.append(t)
        record["away"] = len(self.away)  # nodes without their RAM now
        self.say("%s   (applied at t=%.1f s)" % (fault, time.time() - t0))
        self.records.append(record)

    def _return(self, n):
        self.away.discard(n)
        self.job.start_agent(n)
        self.job.wait_listening(n)
        self.job.start_supervisor(n)

    def heal_due(self, everything=False):
        now = time.time()
        due = [h for h in self.heals if everything or h[0] <= now]
        self.heals = [h for h in self.heals if h not in due]
        for _, fn, what in sorted(due, key=lambda h: h[0]):
            fn()
            self.say("           %s" % what)


def snapshot_backups(root, seen):
    """Hashes files of committed backups not seen before; returns violations
    for files seen earlier that changed or went."""
    problems = []
    if os.path.isdir(root):
        for entry in sorted(os.listdir(root)):
            b = os.path.join(root, entry)
            if not os.path.isfile(os.path.join(b, "strata.backup")):
                continue
            for dirpath, _, files in os.walk(b):
                for f in files:
                    path = os.path.join(dirpath, f)
                    if path not in seen:
                        seen[path] = _digest(path)
    for path, digest in seen.items():
        now = _digest(path) if os.path.exists(path) else None
        if now != digest:
            problems.append("committed backup file %s was %s" %
                            (path, "deleted" if now is None else "modified"))
    return problems


def _digest(path):
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def reference_digests(build, work, nodes, steps):
    trainer = os.path.join(build, "toy-trainer")
    procs = {n: subprocess.Popen([trainer, "--dir", os.path.join(work, "ref%d" % n), "--steps",
                                  str(steps), "--state-mb", str(STATE_MB), "--seed", str(100 + n),
                                  "--max-to-keep", "1"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
             for n in range(nodes)}
    out = {}
    for n, p in procs.items():
        text, _ = p.communicate(timeout=600)
        m = re.findall(r"digest=(\w+)", text)
        out[n] = m[-1] if m else None
    return out


def run_seed(build, seed, nodes, seconds, kinds, keep, say):
    faults = schedule.make(seed, nodes, seconds, kinds=kinds, mean_gap=MEAN_GAP)
    say(schedule.format(seed, faults))
    work = tempfile.mkdtemp(prefix="strata-chaos.%d." % seed, dir="/dev/shm")
    steps = int(seconds * 1000 / STEP_MS) + 600
    report = {"seed": seed, "nodes": nodes, "seconds": seconds, "steps": steps,
              "faults": [], "violations": []}
    try:
        refs = reference_digests(build, work, nodes, steps)
        with netbed.NetBed(["n%d" % n for n in range(nodes)]) as bed:
            job = Job(bed, build, work, nodes, steps)
            t0 = time.time()
            for n in range(nodes):
                job.start_agent(n)
            for n in range(nodes):
                job.wait_listening(n)
            for n in range(nodes):
                job.start_supervisor(n)
            applier = Faults(job, say)
            collective = Collective(job)
            seen_backups = {}
            pending = list(faults)
            while pending or applier.heals:
                collective.look()
                if job.finished():
                    for f in pending:
                        say("t=%6.1f s  %s: not applied, the job had finished" % (f.at, f))
                    break
                if pending and time.time() - t0 >= pending[0].at:
                    applier.apply(pending.pop(0), t0)
                    report["violations"] += snapshot_backups(job.backup, seen_backups)
                applier.heal_due()
                time.sleep(0.1)
            applier.heal_due(everything=True)
            for t in applier.threads:
                t.join(timeout=180)
            deadline = time.time() + steps * STEP_MS / 1000 * 3 + 300
            while not job.finished() and time.time() < deadline:
                collective.look()
                time.sleep(0.1)
            report["seconds_total"] = round(time.time() - t0, 1)
            report["violations"] += check(job, refs, applier, seen_backups)
            report["faults"] = summarize(job, applier)
            crashed = [n for n, p in job.agents.items()
                       if p.poll() is not None and p.pid not in job.killed_agents]
            report["violations"] += ["the agent of node %d exited on its own (exit %s)" %
                                     (n, job.agents[n].returncode) for n in crashed]
        left = _pids_with_arg(work)
        report["violations"] += ["process %d was left behind" % pid for pid in left]
        for pid in left:
            _kill(pid)
    finally:
        if keep or report["violations"]:
            say("kept %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return report


def check(job, refs, applier, seen_backups):
    v = []
    for n in range(job.nodes):
        p = job.supervisors[n]
        if p.poll() is None:
            v.append("node %d: the job did not finish" % n)
            continue
        text = _tail(job.log("run", n)).decode(errors="replace")
        got = re.findall(r"final step=\d+ digest=(\w+)", text)
        if p.returncode != 0:
            v.append("node %d: strata run exited %d" % (n, p.returncode))
        if not got or got[-1] != refs[n]:
            v.append("node %d: final digest %s, an uninterrupted run ends at %s" %
                     (n, got[-1] if got else "none", refs[n]))
    restores = job.restores()
    everyone = set.intersection(*(set(r) for r in restores.values())) if restores else set()
    for n, steps in restores.items():
        for s in steps:
            if s not in everyone:
                v.append("node %d restored step %d, which not every node restored" % (n, s))
    for n in range(job.nodes):
        text = _tail(job.log("agent", n)).decode(errors="replace")
        for sign in ABORT_SIGNS:
            if sign in text:
                v.append("the agent log of node %d contains %r" % (n, sign))
    v += snapshot_backups(job.backup, seen_backups)
    return v


def summarize(job, applier):
    """Work lost and recovery per fault that restarted the job."""
    final = job.restores()
    out = []
    for i, r in enumerate(applier.records):
        entry = {"kind": r["kind"], "nodes": r["nodes"], "at": r["at"]}
        if "skipped" in r:
            entry["skipped"] = r["skipped"]
        elif r["kind"] in RESTARTS:
            # The first restore of each node after this fault (and before the next).
            after = [final[n][len(r["restores"].get(n, [])):] for n in range(job.nodes)]
            firsts = [a[0] for a in after if a]
            if firsts and r["before"] >= 0:
                entry["lost_steps"] = max(0, r["before"] - min(firsts))
                # With one node away its peer holds its steps; with more, a
                # node and its peer may both be gone: the backup serves.
                many_away = r.get("away", 0) > 1
                entry["bound"] = (BACKUP_EVERY if many_away else INTERVAL) + INTERVAL
        out.append(entry)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--seeds", default="3",
                    help="N (seeds 1..N), a range A-B, or a list A,B,C")
    ap.add_argument("--minutes", type=float, default=1.0, help="of faults, per seed")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--kinds", default=",".join(SUPPORTED))
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--keep", action="store_true", help="keep every run's directory")
    a = ap.parse_args()
    kinds = a.kinds.split(",")
    unsupported = sorted(set(kinds) - set(SUPPORTED))
    if unsupported:
        raise SystemExit("chaos: fault kind(s) %s not applied by this runner yet (it applies %s)"
                         % (", ".join(unsupported), ", ".join(SUPPORTED)))
    seeds = []
    if a.seeds.isdigit():
        seeds = list(range(1, int(a.seeds) + 1))
    else:
        for part in a.seeds.split(","):
            lo, _, hi = part.partition("-")
            seeds += list(range(int(lo), int(hi or lo) + 1))
    netbed.sweep()
    reports = []
    for seed in seeds:
        r = run_seed(a.build, seed, a.nodes, a.minutes * 60, kinds, a.keep,
                     lambda s: print(s, flush=True))
        reports.append(r)
        for f in r["faults"]:
            if "lost_steps" in f and f["lost_steps"] > f["bound"]:
                r["violations"].append("%s at t=%.1f s lost %d steps (bound %d)" %
                                       (f["kind"], f["at"], f["lost_steps"], f["bound"]))
        verdict = "ok" if not r["violations"] else "FAILED: " + r["violations"][0]
        print("seed %d: %s (%d faults, %.0f s)" % (seed, verdict, len(r["faults"]),
                                                    r.get("seconds_total", 0)), flush=True)
    print_figures(reports)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(reports, f, indent=1)
    failed = [r for r in reports if r["violations"]]
    if failed:
        for r in failed:
            print("seed %d: %s" % (r["seed"], "; ".join(r["violations"])))
        sys.exit(1)


def print_figures(reports):
    by_kind = {}
    for r in reports:
        for f in r["faults"]:
            by_kind.setdefault(f["kind"], []).append(f)
    print("\n%-22s %6s %8s %12s %10s" % ("fault", "count", "skipped", "lost median", "lost max"))
    for kind in sorted(by_kind):
        fs = by_kind[kind]
        lost = [f["lost_steps"] for f in fs if "lost_steps" in f]
        print("%-22s %6d %8d %12s %10s" % (
            kind, len(fs), sum("skipped" in f for f in fs),
            "%g" % statistics.median(lost) if lost else "-", max(lost) if lost else "-"))
    print("runs %d, seeds with a violation %d" % (len(reports),
                                                 sum(bool(r["violations"]) for r in reports)))


if __name__ == "__main__":
    main()
