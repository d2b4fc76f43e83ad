"""A real Prometheus scrapes a running 4-node job.

Four `strata agent` processes on loopback serve --metrics; Debian's
`prometheus` scrapes them every second; four toy trainers save, the agents
replicate and back up; then node 1 is replaced and its step restored from
its peer. The test asks Prometheus' HTTP API, as a dashboard would, and
checks that every value moved. STRATA_BUILD_DIR names the build directory.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "harness"))
import loopback_ports  # noqa: E402 - the shared port picker of every suite

BUILD = os.environ.get("STRATA_BUILD_DIR", "build")
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
NODES = 4


def free_port():
    """A port in the cluster suites' range: this suite holds ctest's lock
    strata_cluster with them (tests/harness/loopback_ports.py)."""
    return loopback_ports.free_port(loopback_ports.CLUSTER)


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError("timed out after %d s waiting for %s" % (timeout, what))


class Job:
    def __init__(self, root):
        self.root = root
        self.strata = os.path.join(BUILD, "strata")
        self.trainer = os.path.join(BUILD, "toy-trainer")
        self.secret = os.path.join(root, "secret")
        with open(self.secret, "w") as f:
            f.write("prometheus-test-%s\n" % os.urandom(8).hex())
        os.chmod(self.secret, 0o600)
        self.ports = [free_port() for _ in range(NODES)]
        self.metrics = [free_port() for _ in range(NODES)]
        self.agents = {}
        self.procs = []

    def dir(self, n):
        return os.path.join(self.root, "node%d" % n)

    def start_agent(self, n):
        os.makedirs(self.dir(n), exist_ok=True)
        log = open(os.path.join(self.root, "agent%d.log" % n), "ab")
        p = subprocess.Popen([
            self.strata, "agent", "--local-dir", self.dir(n), "--listen",
            "127.0.0.1:%d" % self.ports[n], "--coordinator", "127.0.0.1:%d" % self.ports[0],
            "--secret-file", self.secret, "--backup", "file://" + os.path.join(self.root, "backup"),
            "--metrics", "127.0.0.1:%d" % self.metrics[n]], stdout=log, stderr=log)
        self.agents[n] = p
        self.procs.append(p)
        wait_for(lambda: b"listening on" in open(log.name, "rb").read(), 30, "agent %d" % n)

    def train(self, steps):
        trainers = [subprocess.Popen([
            self.trainer, "--dir", self.dir(n), "--steps", str(steps), "--save-interval-steps",
            "10", "--state-mb", "2", "--step-ms", "40", "--seed", str(100 + n), "--replicator",
            "orbax", "--job", "prom", "--node-rank", str(n), "--nodes", str(NODES),
            "--backup-interval-steps", "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True) for n in range(NODES)]
        self.procs += trainers
        outs = [t.communicate(timeout=180) for t in trainers]
        for n, t in enumerate(trainers):
            assert t.returncode == 0, "trainer %d: %s" % (n, outs[n][1])
        return [o[0] for o in outs]

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()


class Prometheus:
    def __init__(self, root, targets):
        self.port = free_port()
        config = os.path.join(root, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: strata\n    static_configs:\n"
                    "      - targets: [%s]\n" % ", ".join("'127.0.0.1:%d'" % p for p in targets))
        self.log = open(os.path.join(root, "prometheus.log"), "ab")
        self.proc = subprocess.Popen([
            PROMETHEUS, "--config.file", config, "--storage.tsdb.path",
            os.path.join(root, "tsdb"), "--web.listen-address", "127.0.0.1:%d" % self.port],
            stdout=self.log, stderr=self.log)
        wait_for(lambda: self._get("/-/ready") is not None, 60, "prometheus to be ready")

    def _get(self, path):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path),
                                        timeout=5) as r:
                return r.read()
        except OSError:
            return None

    def query(self, expr):
        """The instant vector of `expr`: {labels as a sorted tuple: value}."""
        body = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        if body is None:
            return {}
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        return {tuple(sorted(r["metric"].items())): float(r["value"][1])
                for r in answer["data"]["result"]}

    def scalar(self, expr):
        values = list(self.query(expr).values())
        return values[0] if values else None

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def bed():
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.fail("prometheus not installed (apt-get install prometheus; "
                    "scripts/install-deps.sh does)")
    root = tempfile.mkdtemp(prefix="strata-prometheus.", dir="/dev/shm")
    job = Job(root)
    prom = None
    try:
        for n in range(NODES):
            job.start_agent(n)
        prom = Prometheus(root, job.metrics)
        yield job, prom
    finally:
        job.stop()
        if prom:
            prom.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_prometheus_sees_saves_replication_backups_and_restores(bed):
    job, prom = bed
    wait_for(lambda: prom.scalar("sum(up)") == NODES, 30, "every agent scraped (up == 1)")
    assert prom.scalar("sum(strata_local_commit_bytes_total)") in (None, 0.0)

    job.train(60)
    wait_for(lambda: (prom.scalar("sum(strata_local_commit_bytes_total)") or 0) >= NODES * 6 * 2e6,
             30, "every node's 6 local commits")
    wait_for(lambda: (prom.scalar("sum(strata_replication_bytes_total)") or 0) >= NODES * 2e6, 30,
             "replication bytes")
    wait_for(lambda: (prom.scalar("sum(strata_backup_bytes_total)") or 0) >= NODES * 2e6, 60,
             "backup bytes")
    # Durability lag per tier, as the dashboard asks for the job.
    lag = wait_for(lambda: (lambda q: q if len(q) == 3 else None)(
        prom.query("max by (tier) (strata_durability_lag_seconds)")), 30, "lag of all 3 tiers")
    assert {dict(k)["tier"] for k in lag} == {"ram", "peer", "backup"}
    assert all(v >= 0 for v in lag.values())
    assert (prom.scalar("sum(strata_ram_bytes)") or 0) > 0
    assert prom.scalar("sum(strata_coordinator_round_seconds_count)") >= 1

    # Node 1 is replaced by an empty one; its step comes from its peer.
    job.agents[1].kill()
    job.agents[1].wait()
    shutil.rmtree(job.dir(1))
    job.start_agent(1)
    outs = job.train(80)
    assert "restored step=60" in outs[1], outs[1]
    wait_for(lambda: (prom.scalar('sum(strata_restore_seconds_count{source="peer"})') or 0) >= 1,
             30, "a restore from a peer")
    wait_for(lambda: (prom.scalar('sum(strata_restore_seconds_count{source="own"})') or 0) >= 3,
             30, "three restores from the nodes' own RAM")
    # The lag moved: after the restart the RAM tier's age is young again
    # (counted from the restore, then from the new saves).
    wait_for(lambda: (lambda v: v is not None and v < 120)(
        prom.scalar('max(strata_durability_lag_seconds{tier="ram"})')), 30,
        "the RAM tier's lag after the restart")


def test_shipped_config_and_dashboard_are_valid(bed):
    """deploy/prometheus/prometheus.yml passes promtool, and every query of
    the Grafana dashboard is one Prometheus accepts (asked of the live one,
    scraping a job)."""
    _, prom = bed
    here = os.path.dirname(os.path.abspath(__file__))
    deploy = os.path.join(here, "..", "..", "deploy")
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    r = subprocess.run([promtool, "check", "config",
                        os.path.join(deploy, "prometheus", "prometheus.yml")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(os.path.join(deploy, "grafana", "strata-dashboard.json")) as f:
        dashboard = json.load(f)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 20
    for expr in exprs:
        body = prom._get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert body is not None, "Prometheus refused the dashboard query %r" % expr
        assert json.loads(body)["status"] == "success", expr
