"""The job a chaos run drives on the test bed (chaos.py): an agent and a
supervised toy trainer per node, each node's RAM disk a tmpfs of its own,
backups to S3; and how the harness finds, kills and fails its processes."""
import concurrent.futures
import json
import os
import re
import signal
import subprocess

import bounds
import netbed
import s3host
from bounds import INTERVAL, STEP_MS, read_log, start_records

PORT = 7070
STATE_MB = 4
RAMDISK_MB = 160     # each node's RAM disk (a tmpfs of its own), for disk_full
BACKUP_URL = "s3://%s/job" % s3host.BUCKET


class Violation(Exception):
    pass


class Job:
    """One job on the bed: an agent and a supervised trainer per node, each
    node's directory a small tmpfs (its RAM disk), backups to S3. Even ranks
    speak the replicator protocol as Orbax does, odd ranks as NeMo does."""

    def __init__(self, bed, s3, build, work, nodes, steps, crash_loops=0):
        self.bed, self.s3, self.work, self.nodes, self.steps = bed, s3, work, nodes, steps
        # `strata run --max-quarantines` counts over the supervisor's life:
        # the default (3) plus one for each crash loop the schedule injects
        # (a long soak injects more than three).
        self.max_quarantines = 3 + crash_loops
        self.strata = os.path.join(build, "strata")
        self.trainer = os.path.join(build, "toy-trainer")
        self.secret = os.path.join(work, "secret")
        with open(self.secret, "w") as f:
            f.write("chaos-%d-%s\n" % (os.getpid(), os.urandom(8).hex()))
        os.chmod(self.secret, 0o600)
        self.poison = os.path.join(work, "poison")
        self.hosts = {n: "n%d" % n for n in range(nodes)}
        self.agents, self.supervisors = {}, {}
        self.killed_agents = set()  # pids the harness killed on purpose
        self.crashed = []  # (node, exit code) of agents that exited on their own
        self.agent_log_from = {}  # node -> size of its agent log when it last started
        self.mounted = set()

    def host(self, n):
        return self.hosts[n]

    def address(self, n):
        return "%s:%d" % (self.bed.address(self.host(n)), PORT)

    def dir(self, n):
        return os.path.join(self.work, "node%d" % n)

    def log(self, what, n):
        return os.path.join(self.work, "%s%d.log" % (what, n))

    def mount(self, n):
        """A fresh, empty RAM disk for node n."""
        self.unmount(n)
        os.makedirs(self.dir(n), exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm,mode=0700" % RAMDISK_MB,
                        "strata-chaos", self.dir(n)], check=True)
        self.mounted.add(n)

    def unmount(self, n):
        if n in self.mounted:
            subprocess.run(["umount", "-l", self.dir(n)], check=False)
            self.mounted.discard(n)

    def start_agent(self, n):
        old = self.agents.get(n)
        if old and old.poll() is not None and old.pid not in self.killed_agents:
            self.crashed.append((n, old.returncode))  # before a restart hides it
        log = self.log("agent", n)
        self.agent_log_from[n] = os.path.getsize(log) if os.path.exists(log) else 0
        self.agents[n] = self.bed.spawn(self.host(n), [
            self.strata, "agent", "--local-dir", self.dir(n), "--listen", self.address(n),
            "--coordinator", self.address(0), "--secret-file", self.secret,
            "--backup", BACKUP_URL, "--grace-seconds", "60"], log=log,
            env=dict(os.environ, **self.s3.client_env()))

    def start_supervisor(self, n):
        self.supervisors[n] = self.bed.spawn(self.host(n), [
            self.strata, "run", "--backoff", "200ms,2s", "--grace", "60s",
            "--max-quarantines", str(self.max_quarantines),
            "--agent", os.path.join(self.dir(n), ".strata-agent", "agent.sock"), "--",
            self.trainer, "--dir", self.dir(n), "--steps", str(self.steps),
            "--save-interval-steps", str(INTERVAL), "--state-mb", str(STATE_MB),
            "--step-ms", str(STEP_MS), "--seed", str(100 + n),
            "--replicator", "nemo" if n % 2 else "orbax", "--poison", self.poison,
            "--job", "chaos", "--node-rank", str(n), "--nodes", str(self.nodes),
            "--peers-per-node", "1", "--backup-interval-steps", str(bounds.BACKUP_EVERY),
            "--exit-after-ondemand"], log=self.log("run", n))

    def wait_listening(self, n, limit=30):
        """Waits for the agent started last on node n (its log is appended
        to: an earlier start's line does not count)."""
        log, start = self.log("agent", n), self.agent_log_from[n]
        if not netbed.wait_for(lambda: b"listening on" in read_log(log, start), limit):
            raise Violation("the agent of node %d did not start" % n)

    def trainer_pids(self, n):
        return _pids_with_arg(self.dir(n), self.trainer)

    def kill_trainers(self, nodes):
        for n in nodes:
            for pid in self.trainer_pids(n):
                kill_pid(pid)

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
        """The newest step a rank reports, or -1 (none reports), read from
        every node at once: one `strata status` takes about 0.3 s on a
        loaded host, and read one after another the eighth node's step was
        116 steps past the first's (rs(6,2) seed 153). What each node
        reported is kept in `steps_read` (-1: none)."""
        with concurrent.futures.ThreadPoolExecutor(max(1, self.nodes)) as pool:
            self.steps_read = list(pool.map(lambda n: self.status(n).get("training_step", -1),
                                            range(self.nodes)))
        return max(self.steps_read, default=-1)

    def starts(self):
        """Every node's trainer starts so far, per node: the restored step,
        or None for a fresh start."""
        return {n: [s for s, _ in v] for n, v in start_records(self).items()}

    def failed_on_poison(self):
        """Per node, for each of starts()'s starts, whether that run ended
        at once on a poisoned step (the toy trainer's `is poisoned` line)."""
        return {n: [bad for _, bad in v] for n, v in start_records(self).items()}

    def restores(self):
        """Every node's restored steps so far, in order, per node."""
        return {n: [s for s in v if s is not None] for n, v in self.starts().items()}

    def quarantined(self):
        """The steps each supervisor quarantined."""
        return {n: [int(m) for m in re.findall(r"QUARANTINED step (\d+)",
                                              read_log(self.log("run", n)).decode(errors="replace"))]
                for n in range(self.nodes)}

    def finished(self):
        return all(p.poll() is not None for p in self.supervisors.values())


def kill_pid(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# Every process a run starts inherits RUN_TAG=<its work directory> in its
# environment, so one left behind is found however it was started and
# wherever it was re-parented (as tests/harness/no_process_left_behind.sh does).
RUN_TAG = "STRATA_CHAOS_RUN"


def pids_tagged(work, limit=5):
    """The processes of the run in `work` still alive after `limit` seconds
    (the bed's kills may still be landing)."""
    tag = ("%s=%s" % (RUN_TAG, work)).encode()

    def scan():
        out = []
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == os.getpid():
                continue
            try:
                with open("/proc/%s/environ" % d, "rb") as f:
                    if tag in f.read().split(b"\0"):
                        out.append(int(d))
            except OSError:
                continue
        return out
    netbed.wait_for(lambda: not scan(), limit)
    return scan()


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
        failed = [n for n in ended if b"final step=" not in read_log(job.log("run", n))]
        if failed:
            for pid in self.seen:
                if pid in now:
                    kill_pid(pid)
                    del now[pid]
        self.seen = now
        return failed
