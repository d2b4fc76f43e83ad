#!/usr/bin/env python3
"""make chaos: a real job on a multi-host test bed under seeded random faults.

For each seed: a job of --nodes nodes, each a host of its own on the bed
(netbed.py) with its RAM disk (a small tmpfs), running `strata agent` and
`strata run --agent` with the deterministic toy trainer (even ranks speak
the replicator protocol as Orbax does, odd ranks as NeMo does), backing up
to a real S3 (moto, signatures checked) on a host of its own behind a fault
proxy (s3host.py, s3proxy.py). The seed's schedule (schedule.py) is printed
and applied; when it is over every fault is healed and the job runs to its
end. Then the invariants are checked, and a run that breaks one fails
naming the first violation and the seed:

  * every rank's final state equals an uninterrupted run's, bit for bit (so
    no corrupt byte was restored and no step skipped or repeated wrongly);
  * every supervisor finished with exit 0;
  * every restore restored a step every node restored (the job restores as
    a whole, never a step incomplete for it);
  * the work lost at each fault that restarted the job is within what the
    tiers held (bounds.py);
  * no object of a committed backup was modified or deleted;
  * no agent crashed (only the harness's kill -9 ends one) and none logged
    an abort;
  * no process was left behind.

The figures (faults by kind, overlaps, work lost, recovery times, S3
requests failed, quarantines) are printed per run and summed over the
seeds, and with --json written to a file. Needs root. Only the Python
standard library is used (and moto_server and aws from the project's Python
environment, scripts/python-env.sh).

  chaos.py BUILD --seeds 20 --minutes 2 [--nodes 4] [--kinds partition,kill_agent]
           [--redundancy 'rs(2,2)']
"""
import argparse
import errno
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bounds  # noqa: E402
import netbed  # noqa: E402
import s3host  # noqa: E402
from bounds import (INTERVAL, RESTARTS, STEP_MS, lost_beyond_bound, poisoned_steps,  # noqa: E402
                    read_log, summarize)
import schedule  # noqa: E402
from chaos_job import (STATE_MB, RUN_TAG, Collective, Job, Violation, kill_pid,  # noqa: E402
                       pids_tagged)
from report import print_figures, print_markdown  # noqa: E402

MEAN_GAP = 10.0      # seconds between faults, on average
JOB_STEPS = None     # steps the job trains; None: the fault time at full speed + 600
RAM_REFILL_S = 20    # how long after a node lost its RAM the copies it held count as gone
ABORT_SIGNS = ("AddressSanitizer", "terminate called", "Segmentation fault", "Assertion",
               "core dumped", "Aborted")
S3_MODES = {"s3_unavailable": "down", "s3_errors": "errors 0.5", "s3_slow": "slow 2"}


class Faults:
    """Applies a schedule's faults to a job; records what each did."""

    def __init__(self, job, log):
        self.job, self.bed, self.say = job, job.bed, log
        self.records = []  # one dict per fault applied
        self.heals = []    # (time, fn, what)
        self.away = set()  # nodes whose host is down (lose_node)
        self.threads = []
        self.partitions = []  # the groups cut off now, oldest first
        self.slowed = {}      # node -> how many slow_link faults hold it
        self.s3_modes = []    # (fault id, mode) of the S3 faults in force, oldest first
        self.full = {}        # node -> how many disk_full faults hold it
        self.full_since = -1  # the training step when the disks in self.full began to fill
        self.full_cleared = -10**9  # the training step when the last full disk was freed
        self.slow_since = -1  # the training step when the slow links in force began
        self.slow_cleared = -10**9  # the training step when the last slow link healed
        # (from, to) training steps during which a RAM disk was full or a link
        # slow, each until two save intervals after it healed: the watermark
        # could stand still, and with it the backups.
        self.stalls = []
        self.s3_since = -1    # the training step when the S3 faults in force began
        self.s3_cleared = -10**9  # the training step when the last S3 fault healed
        self.replaced = 0
        self.ram_lost = {}    # node -> when it last lost its RAM (or came back empty)
        self.recovering = []  # records of restarting faults the job has not recovered from
        self.last_step = 0    # the newest training step a status reported

    def step_now(self):
        """The training step now, where a fault's effect begins or ends.
        While the job restarts no trainer reports one: then the step trained
        before the restart (the job resumes from that or an earlier one;
        note_recoveries lowers a stall in force to where it resumed), or,
        the restart not noticed yet, the last step a trainer reported."""
        step = self.job.training_step()
        if step >= 0:
            self.last_step = step
            return step
        if self.recovering:
            return max(x["before"] for x in self.recovering)
        return self.last_step

    def apply(self, fault, t0):
        job = self.job
        record = {"kind": fault.kind, "nodes": list(fault.nodes), "at": fault.at,
                  "applied": time.time()}
        if fault.kind in RESTARTS:  # what the work lost and recovery are measured against
            # The job may be down, restarting from an earlier fault: this one
            # then shares that restart, and what was trained is that fault's.
            record["before"] = self.step_now()
            record["steps_read"] = list(getattr(job, "steps_read", []))
            record["starts"] = job.starts()
            # A save lands again with the first save step after the disk frees.
            full_recent = record["before"] - self.full_cleared < 2 * INTERVAL
            record["full_since"] = self.full_since if self.full or full_recent else -1
            # The trainers here do not slow down with a slow link; replication
            # does, and drains its backlog after the link heals.
            slow_recent = record["before"] - self.slow_cleared < 2 * INTERVAL
            record["slow_since"] = (self.slow_since if self.slowed_any() or slow_recent
                                    else -1)
            record["stalls"] = list(self.stalls)
            if self.full:
                record["stalls"].append((self.full_since, record["before"]))
            if self.slowed_any():
                record["stalls"].append((self.slow_since, record["before"]))
            # Backups resume with the next backup step after S3 heals.
            recent = record["before"] - self.s3_cleared < 2 * bounds.BACKUP_EVERY
            record["s3_since"] = self.s3_since if self.s3_modes or recent else -1
            # Ranks read mid-restart are some restarted, some not: their
            # spread is not how far apart training ran (bounds.rank_spread).
            record["restarting"] = bool(self.recovering)
            self.recovering.append(record)
        k, nodes = fault.kind, list(fault.nodes)
        if any(n in self.away for n in nodes) or (k == "kill_coordinator" and 0 in self.away):
            record["skipped"] = "the node is away"
        else:
            # When it strikes: reading every node's step above takes about
            # 0.3 s, and a backup may begin meanwhile (rs(6,2) seeds 174,
            # 181: 50 ms before the trainers were killed).
            record["struck"] = time.time()
            self._do(fault, k, nodes)
        # Nodes without their RAM now: away, or back (replaced, wiped by
        # maintenance --lose-ram) so recently that their peers' copies of
        # them and their copies of their peers are not yet replaced.
        now = time.time()
        ramless = self.away | {n for n, t in self.ram_lost.items() if now - t < RAM_REFILL_S}
        record["away"] = len(ramless)
        self.say("%s   (%s at t=%.1f s)" % (fault, "skipped: " + record["skipped"]
                                            if "skipped" in record else "applied", time.time() - t0))
        self.records.append(record)

    def _do(self, fault, k, nodes):
        job = self.job
        later = time.time() + fault.seconds
        if k == "kill_trainer":
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
            self._lose(n)
            self.away.add(n)
            self.heals.append((later, lambda: self._return(n), "node %d back, empty" % n))
        elif k == "replace_node":
            self._replace(nodes[0])
            self.ram_lost[nodes[0]] = time.time()
        elif k == "partition":
            group = [job.host(n) for n in nodes]
            self.partitions.append(group)
            self.bed.partition(group)
            job.kill_trainers(range(job.nodes))  # a collective across the cut fails
            self.heals.append((later, lambda: self._heal_partition(group),
                               "partition of nodes %s healed" % ",".join(map(str, nodes))))
        elif k == "slow_link":
            n = nodes[0]
            if not self.slowed_any():
                self.slow_since = self.step_now()
            self.slowed[n] = self.slowed.get(n, 0) + 1
            self.bed.slow(job.host(n), "10mbit")
            self.heals.append((later, lambda: self._unslow(n), "link of node %d back to speed" % n))
        elif k in S3_MODES:
            self._s3_fault(k, later)
        elif k == "disk_full":
            n = nodes[0]
            if not self.full:
                self.full_since = self.step_now()
            self.full[n] = self.full.get(n, 0) + 1
            self._fill(n)
            self.heals.append((later, lambda: self._unfill(n), "RAM disk of node %d freed" % n))
        elif k == "crash_loop":  # the next step the job restores breaks it
            poisoned = poisoned_steps(job)  # and those that broke it before still do
            _write_poison(job, [str(p) for p in sorted(poisoned)] + ["next"])
            try:
                os.unlink(job.poison + ".step")  # the claim of the last "next"
            except FileNotFoundError:
                pass
            job.kill_trainers(range(job.nodes))
        elif k.startswith("maintenance"):
            # On the node: its agent's local socket (--lose-ram is served only there).
            argv = [job.strata, "maintenance", "--agent",
                    os.path.join(job.dir(nodes[0]), ".strata-agent", "agent.sock"), "--grace", "60s"]
            if k == "maintenance_lose_ram":
                argv.append("--lose-ram")
                self.ram_lost[nodes[0]] = time.time()
            env = dict(os.environ, STRATA_SECRET_FILE=job.secret)

            def maintain(argv=argv, env=env, node=nodes[0]):
                r = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env)
                if r.returncode != 0:  # an overlapping fault may cut it short: said, not judged
                    self.say("strata maintenance on node %d: exit %d: %s" %
                             (node, r.returncode, (r.stderr or r.stdout).strip()[-300:]))
            t = threading.Thread(target=maintain, daemon=True)
            t.start()
            self.threads.append(t)
        else:
            raise Violation("fault kind %r has no applier" % k)

    def _lose(self, n):
        """Node n goes, its RAM with it; the rest of the job fails with it."""
        job = self.job
        job.kill_supervisor(n)
        job.kill_agent(n)
        job.kill_trainers(range(job.nodes))
        job.unmount(n)
        shutil.rmtree(job.dir(n), ignore_errors=True)

    def _return(self, n):
        self.away.discard(n)
        self.ram_lost[n] = time.time()
        self.job.mount(n)
        self.job.start_agent(n)
        self.job.wait_listening(n)
        self.job.start_supervisor(n)

    def _replace(self, n):
        """Node n gone for good: its host removed, a new empty host in its
        place. The new host gets a new address, except node 0's: the
        coordinator is reached by a name that follows it (as a Kubernetes
        headless Service's does), here its address."""
        job = self.job
        old = job.host(n)
        self._lose(n)
        address = self.bed.address(old) if n == 0 else None
        self.bed.remove_host(old)
        self.replaced += 1
        job.hosts[n] = "n%dr%d" % (n, self.replaced)
        self.bed.add_host(job.hosts[n], address)
        self._heal_partition(None)  # the new host starts connected, like every new host
        self._return(n)

    def _heal_partition(self, group):
        """Heals `group` (None: none); the groups still cut off stay so."""
        self.partitions = [g for g in self.partitions if g is not group]
        self.bed.heal()
        live = [h for group in self.partitions for h in group if h in self.bed.hosts]
        if live:  # on one island: they reach each other, as overlapping cuts may
            self.bed.partition(live)

    def slowed_any(self):
        return any(v > 0 for v in self.slowed.values())

    def _unslow(self, n):
        self.slowed[n] -= 1
        if self.slowed[n] == 0 and self.job.host(n) in self.bed.hosts:
            self.bed.unslow(self.job.host(n))
        if not self.slowed_any():
            self.slow_cleared = self.step_now()
            self.stalls.append((self.slow_since, self.slow_cleared + 2 * INTERVAL))

    def _s3_fault(self, kind, until):
        if not self.s3_modes:
            self.s3_since = self.step_now()
        ident = object()
        self.s3_modes.append((ident, S3_MODES[kind]))
        self._s3_apply()

        def heal():
            self.s3_modes = [m for m in self.s3_modes if m[0] is not ident]
            if not self.s3_modes:
                self.s3_cleared = self.step_now()
            self._s3_apply()
        self.heals.append((until, heal, "%s over" % kind))

    def _s3_apply(self):
        """The newest S3 fault in force decides the proxy's mode; a slow S3
        has a slow link too."""
        mode = self.s3_modes[-1][1] if self.s3_modes else "pass"
        self.job.s3.set_mode(mode)
        if mode.startswith("slow"):
            self.bed.slow(self.job.s3.host, "20mbit")
        else:
            self.bed.unslow(self.job.s3.host)

    def _fill(self, n):
        """Takes every free byte of node n's RAM disk."""
        path = os.path.join(self.job.dir(n), ".chaos-fill")
        try:
            st = os.statvfs(self.job.dir(n))
            with open(path, "ab") as f:
                free = st.f_bavail * st.f_frsize
                if free > 0:
                    os.posix_fallocate(f.fileno(), os.fstat(f.fileno()).st_size, free)
        except OSError as e:
            if e.errno != errno.ENOSPC and n not in self.away:  # full already is the point
                self.say("           disk_full on node %d not applied: %s" % (n, e))

    def _unfill(self, n):
        self.full[n] -= 1
        if self.full[n] == 0:
            del self.full[n]
            if not self.full:
                self.full_cleared = self.step_now()
                self.stalls.append((self.full_since, self.full_cleared + 2 * INTERVAL))
            try:
                os.unlink(os.path.join(self.job.dir(n), ".chaos-fill"))
            except OSError:
                pass

    def note_recoveries(self):
        """A restarting fault is recovered from when every node's trainer
        has started again (restored or, with nothing held, started fresh)."""
        if not self.recovering:
            return
        now = self.job.starts()
        poisoned = poisoned_steps(self.job)
        for r in list(self.recovering):
            if all(any(s not in poisoned for s in now[n][len(r["starts"].get(n, [])):])
                   for n in now):
                r["recovery_s"] = round(time.time() - r["applied"], 2)
                self.recovering.remove(r)
                firsts = [next(s for s in now[n][len(r["starts"].get(n, [])):]
                               if s not in poisoned) for n in now]
                self._stalls_resumed_from(min(s or 0 for s in firsts))
                if r["kind"] == "crash_loop" and all(s is None for s in firsts):
                    _disarm_poison(self.job)

    def _stalls_resumed_from(self, step):
        """The job resumed from `step` after a restart: a full disk or slow
        link still in force counts from there, not from the step the status
        reported when it began (the last one trained before the restart,
        which the job trains again). One that healed before the job resumed
        did not touch the steps trained again."""
        if self.full and self.full_since > step:
            self.full_since = step
        if self.slowed_any() and self.slow_since > step:
            self.slow_since = step

    def heal_due(self, everything=False):
        now = time.time()
        due = [h for h in self.heals if everything or h[0] <= now]
        self.heals = [h for h in self.heals if h not in due]
        for _, fn, what in sorted(due, key=lambda h: h[0]):
            fn()
            self.say("           %s" % what)


def snapshot_backups(s3, seen):
    """Records the objects of committed backups not seen before (ETag,
    size, time); returns violations for objects seen earlier that changed
    or went."""
    objects = s3.objects()
    committed = {k[:-len("strata.backup")] for k in objects if k.endswith("/strata.backup")}
    for key, meta in objects.items():
        if key not in seen and any(key.startswith(c) for c in committed):
            seen[key] = meta
    problems = []
    for key, meta in seen.items():
        now = objects.get(key)
        if now != meta:
            problems.append("object s3://%s/%s of a committed backup was %s" %
                            (s3host.BUCKET, key, "deleted" if now is None else "modified"))
    return problems


def reference_digests(build, nodes, steps):
    """Each rank's final digest in an uninterrupted run, computed once per
    (trainer binary, nodes, steps) and kept in /dev/shm for the next seeds."""
    trainer = os.path.join(build, "toy-trainer")
    st = os.stat(trainer)
    cache = "/dev/shm/strata-chaos-refs.%d.%d.%d.%d.%d.json" % (
        st.st_mtime_ns, st.st_size, nodes, steps, STATE_MB)
    try:
        with open(cache) as f:
            return {int(k): v for k, v in json.load(f).items()}
    except (OSError, ValueError):
        pass
    work = tempfile.mkdtemp(prefix="strata-chaos-ref.", dir="/dev/shm")
    try:
        procs = {n: subprocess.Popen([trainer, "--dir", os.path.join(work, "ref%d" % n),
                                      "--steps", str(steps), "--state-mb", str(STATE_MB),
                                      "--seed", str(100 + n), "--max-to-keep", "1"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                 for n in range(nodes)}
        out = {}
        for n, p in procs.items():
            # About 6 ms a step with eight ranks on two cores: allow 20.
            text, _ = p.communicate(timeout=600 + steps // 50)
            m = re.findall(r"digest=(\w+)", text)
            out[n] = m[-1] if m else None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if all(out.values()):
        tmp = cache + ".%d" % os.getpid()
        with open(tmp, "w") as f:
            json.dump(out, f)
        os.replace(tmp, cache)
    return out


def run_seed(build, seed, nodes, seconds, kinds, keep, say):
    faults = schedule.make(seed, nodes, seconds, kinds=kinds, mean_gap=MEAN_GAP)
    say(schedule.format(seed, faults))
    work = tempfile.mkdtemp(prefix="strata-chaos.%d." % seed, dir="/dev/shm")
    os.environ[RUN_TAG] = work  # inherited by everything the run starts
    steps = JOB_STEPS or int(seconds * 1000 / STEP_MS) + 600
    report = {"seed": seed, "nodes": nodes, "seconds": seconds, "steps": steps,
              "redundancy": os.environ.get("STRATA_REDUNDANCY", "copies"),
              "backup_every": bounds.BACKUP_EVERY,
              "overlapping": schedule.overlapping(faults), "faults": [], "violations": []}
    job = None
    try:
        refs = reference_digests(build, nodes, steps)
        with netbed.NetBed(["n%d" % n for n in range(nodes)] + ["s3"]) as bed:
            s3 = s3host.S3Host(bed, "s3", work)
            s3.start()
            job = Job(bed, s3, build, work, nodes, steps,
                      crash_loops=sum(f.kind == "crash_loop" for f in faults))
            t0 = time.time()
            for n in range(nodes):
                job.mount(n)
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
                applier.note_recoveries()
                if job.finished():
                    for f in pending:
                        say("t=%6.1f s  %s: not applied, the job had finished" % (f.at, f))
                    break
                if pending and time.time() - t0 >= pending[0].at:
                    applier.apply(pending.pop(0), t0)
                    report["violations"] += snapshot_backups(s3, seen_backups)
                applier.heal_due()
                time.sleep(0.1)
            applier.heal_due(everything=True)
            for t in applier.threads:
                t.join(timeout=180)
            deadline = time.time() + steps * STEP_MS / 1000 * 3 + 300
            while not job.finished() and time.time() < deadline:
                collective.look()
                applier.note_recoveries()
                time.sleep(0.1)
            report["seconds_total"] = round(time.time() - t0, 1)
            report["violations"] += check(job, refs, seen_backups)
            report["faults"] = summarize(job, applier)
            # Here, not after: a run with a violation keeps its directory.
            report["violations"] += lost_beyond_bound(report["faults"])
            report["s3_injected"] = s3.injected()
            report["quarantined"] = sum(len(q) for q in job.quarantined().values())
            # The job's restarts: trainer starts after the first, on the node
            # that started most (scripts/chaos-table.py tabulates them).
            report["restarts"] = max((len(s) - 1 for s in job.starts().values()), default=0)
            crashed = job.crashed + [(n, p.returncode) for n, p in job.agents.items()
                                     if p.poll() is not None and p.pid not in job.killed_agents]
            report["violations"] += ["the agent of node %d exited on its own (exit %s)" % c
                                     for c in crashed]
        left = pids_tagged(work)
        report["violations"] += ["process %d was left behind" % pid for pid in left]
        for pid in left:
            kill_pid(pid)
    finally:
        if job:
            for n in list(job.mounted):
                job.unmount(n)
        if keep or report["violations"]:
            say("kept %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return report


def check(job, refs, seen_backups):
    v = []
    for n in range(job.nodes):
        p = job.supervisors[n]
        if p.poll() is None:
            v.append("node %d: the job did not finish" % n)
            continue
        text = read_log(job.log("run", n)).decode(errors="replace")
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
        text = read_log(job.log("agent", n)).decode(errors="replace")
        for sign in ABORT_SIGNS:
            if sign in text:
                v.append("the agent log of node %d contains %r" % (n, sign))
    v += snapshot_backups(job.s3, seen_backups)
    return v


def _disarm_poison(job):
    """A crash loop whose job started fresh had no step to poison: its
    "next" must not fire at a later fault's restart (rs(6,2) seed 186: it
    poisoned a partition's restore 13 s later, and the partition was judged
    by the crash loop's fallback). A claimed one is left as it is."""
    if os.path.exists(job.poison + ".step"):
        return
    try:
        with open(job.poison) as f:
            words = f.read().split()
    except OSError:
        return
    if "next" not in words:
        return
    _write_poison(job, [w for w in words if w != "next"])


def _write_poison(job, words):
    """Replaces the poison file, a word a line, at once for the trainers."""
    with open(job.poison + ".tmp", "w") as f:
        f.write("".join(w + "\n" for w in words))
    os.replace(job.poison + ".tmp", job.poison)


def main():
    global JOB_STEPS  # read by the runs (forked, when --jobs > 1)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--seeds", default="3",
                    help="N (seeds 1..N), a range A-B, or a list A,B,C")
    ap.add_argument("--minutes", type=float, default=1.0, help="of faults, per seed")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--kinds", default=",".join(sorted(schedule.KINDS)))
    ap.add_argument("--json", help="write the figures here (again after every seed)")
    ap.add_argument("--keep", action="store_true", help="keep every run's directory")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (each on a bed of its own)")
    ap.add_argument("--redundancy", default="copies",
                    help="the agents' --redundancy: copies, xor(N) or rs(K,M) (groups of at "
                         "most --nodes)")
    ap.add_argument("--backup-every", type=int, default=bounds.BACKUP_EVERY,
                    help="steps between backups (a soak's store holds every backup: "
                         "raise it for long runs)")
    ap.add_argument("--steps", type=int,
                    help="steps the job trains (default: the fault time at full speed + 600; "
                         "a soak's restarts slow it to a fraction of that, and the run is "
                         "checked only once the job finished)")
    ap.add_argument("--figures", metavar="JSON",
                    help="print the figures of a --json file as markdown, run nothing")
    a = ap.parse_args()
    if a.figures:
        with open(a.figures) as f:
            print_markdown(json.load(f))
        return
    bounds.BACKUP_EVERY = a.backup_every
    JOB_STEPS = a.steps
    kinds = a.kinds.split(",")
    unknown = sorted(set(kinds) - set(schedule.KINDS))
    if unknown:
        raise SystemExit("chaos: unknown fault kind(s) %s (known: %s)"
                         % (", ".join(unknown), ", ".join(sorted(schedule.KINDS))))
    seeds = []
    if a.seeds.isdigit():
        seeds = list(range(1, int(a.seeds) + 1))
    else:
        for part in a.seeds.split(","):
            lo, _, hi = part.partition("-")
            seeds += list(range(int(lo), int(hi or lo) + 1))
    if not re.fullmatch(r"copies|xor(\(\d+\))?|rs\(\d+,\d+\)", a.redundancy):
        raise SystemExit("chaos: --redundancy %s is none of copies, xor(N), rs(K,M)"
                         % a.redundancy)
    os.environ["STRATA_REDUNDANCY"] = a.redundancy  # every agent of every run
    netbed.sweep()
    args = [(a.build, seed, a.nodes, a.minutes * 60, kinds, a.keep, a.jobs > 1) for seed in seeds]
    reports = []

    def save():  # after every seed: a run stopped early keeps the seeds it finished
        if a.json:
            with open(a.json + ".tmp", "w") as f:
                json.dump(reports, f, indent=1)
            os.replace(a.json + ".tmp", a.json)

    if a.jobs > 1:  # a process per run: each bed claims a subnet and takes its names from it
        with multiprocessing.get_context("fork").Pool(a.jobs, maxtasksperchild=1) as pool:
            for report in pool.imap(_one_seed, args):
                reports.append(report)
                save()
    else:
        for x in args:
            reports.append(_one_seed(x))
            save()
    print_figures(reports)
    failed = [r for r in reports if r["violations"]]
    if failed:
        for r in failed:
            print("seed %d: %s" % (r["seed"], "; ".join(r["violations"])))
        sys.exit(1)


def _one_seed(args):
    """run_seed with its verdict printed; a harness error fails the run."""
    build, seed, nodes, seconds, kinds, keep, tagged = args

    def say(line):
        if tagged:
            line = "\n".join("[seed %d] %s" % (seed, x) for x in line.splitlines())
        print(line, flush=True)
    try:
        r = run_seed(build, seed, nodes, seconds, kinds, keep, say)
    except Exception as e:  # noqa: BLE001 (any failure of a run is reported with its seed)
        say(traceback.format_exc())
        r = {"seed": seed, "faults": [], "violations": ["the run failed: %s: %s" %
                                                        (type(e).__name__, e)]}
    verdict = "ok" if not r["violations"] else "FAILED: " + r["violations"][0]
    print("seed %d: %s (%d faults, %.0f s)" % (seed, verdict, len(r["faults"]),
                                                r.get("seconds_total", 0)), flush=True)
    return r


if __name__ == "__main__":
    main()
