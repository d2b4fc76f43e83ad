"""Fixtures for the Python tests: scratch directories on tmpfs, the example
trainer as a subprocess, and real `strata agent` processes on loopback."""

import faulthandler
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "harness"))
import loopback_ports  # noqa: E402 - the shared port picker of every suite
EXAMPLE = REPO / "python" / "examples" / "train_mlp.py"
STRATA_BIN = os.environ.get("STRATA_BIN", str(REPO / "build" / "strata"))

# Every child process a test starts; whatever is still running when the
# test ends (it failed midway) is killed, so no trainer or agent outlives it.
_children = []


# A test that has not ended after this long prints every thread's stack and
# ends the run: a hang names itself instead of taking ctest's whole timeout.
TEST_WATCHDOG_SECONDS = 600


@pytest.fixture(autouse=True)
def _watchdog():
    faulthandler.dump_traceback_later(TEST_WATCHDOG_SECONDS, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(autouse=True)
def _kill_leftover_children():
    yield
    while _children:
        p = _children.pop()
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.fixture
def scratch():
    """A fresh directory on tmpfs (the RAM disk a node would use)."""
    root = "/dev/shm" if os.path.isdir("/dev/shm") else None
    d = Path(tempfile.mkdtemp(prefix="strata-pytest-", dir=root))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def free_ports(count: int):
    """`count` free loopback ports for this suite (tests/harness/loopback_ports.py)."""
    return loopback_ports.free_ports(count, loopback_ports.PYTHON)


def free_port() -> int:
    return free_ports(1)[0]


class Trainer:
    """The example trainer (python/examples/train_mlp.py) as a child process."""

    def __init__(self, directory, *args, env=None):
        full_env = dict(os.environ, **(env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--dir", str(directory), *map(str, args)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env)
        _children.append(self.proc)
        self.lines = []

    def wait_for_line(self, prefix: str, timeout: float = 120) -> str:
        """Reads output until a line starts with `prefix`; returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))
            if line.startswith(prefix):
                return line.rstrip("\n")
        raise AssertionError(f"no line starting with {prefix!r}; output so far:\n"
                             + "\n".join(self.lines[-20:]) + "\n" + self.stderr_tail())

    def finish(self, timeout: float = 300) -> int:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            self.lines += out.splitlines()
            self.err = err
            raise AssertionError(f"trainer still running after {timeout} s:\n" +
                                 "\n".join(self.lines[-10:]) + "\n" + self.stderr_tail())
        self.lines += out.splitlines()
        self.err = err
        return self.proc.returncode

    def stderr_tail(self) -> str:
        return getattr(self, "err", "")[-3000:]

    def line(self, prefix: str) -> str:
        found = [l for l in self.lines if l.startswith(prefix)]
        assert found, f"no {prefix!r} line in:\n" + "\n".join(self.lines[-20:]) + \
            "\n" + self.stderr_tail()
        return found[-1]

    def digest(self) -> str:
        return self.line("final step=").split("digest=")[1]


def on_every_node(count: int, fn, timeout: float = 600):
    """fn(node) for nodes 0..count-1 at once, one thread each, as the nodes'
    clients run; the results in node order. Fails naming the nodes that raised."""
    results, errors = [None] * count, []

    def run(node):
        try:
            results[node] = fn(node)
        except BaseException as e:  # reported below, with the node
            errors.append((node, repr(e)))

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not errors, sorted(errors)[:5]
    return results


def wait_all(procs, timeout: float) -> None:
    """Waits up to `timeout` seconds in all for `procs` to exit."""
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass


def wait_or_kill(procs, timeout: float) -> None:
    """Waits up to `timeout` seconds for all of `procs`; kills any still
    running then (its return code is then the signal's)."""
    try:
        wait_all(procs, timeout)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def result_of(text: str):
    """The JSON of the last `RESULT {...}` line a worker printed, or None."""
    lines = [l for l in text.splitlines() if l.startswith("RESULT ")]
    return json.loads(lines[-1][len("RESULT "):]) if lines else None


def run_ranks(worker: Path, root: Path, name: str, world: int, args, *, env: dict,
              timeout: float, codes=(0,)) -> list:
    """Runs `world` ranks of the torch.distributed worker script `worker`
    (`--rank R --world W --port P`, then `args`), each logging to
    root/<name>-rank<R>.log; every rank is killed if the run outlives
    `timeout` seconds. Asserts each rank's exit code is in `codes`; returns
    [(its RESULT object or None, its log text)] in rank order."""
    port = free_port()
    procs, logs = [], []
    for rank in range(world):
        logs.append(root / f"{name}-rank{rank}.log")
        with open(logs[-1], "w") as out:
            procs.append(subprocess.Popen(
                [sys.executable, str(worker), "--rank", str(rank), "--world", str(world),
                 "--port", str(port), *map(str, args)],
                stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, **env)))
        _children.append(procs[-1])
    wait_or_kill(procs, timeout)
    out = []
    for rank, (p, log) in enumerate(zip(procs, logs)):
        text = log.read_text(errors="replace")
        assert p.returncode in codes, f"{name} rank {rank}: exit {p.returncode}\n{text[-4000:]}"
        out.append((result_of(text), text))
    return out


def run_trainer(directory, *args, env=None, expect_rc=0) -> Trainer:
    t = Trainer(directory, *args, env=env)
    rc = t.finish()
    assert rc == expect_rc, f"trainer exited {rc}:\n" + "\n".join(t.lines[-10:]) + \
        "\n" + t.stderr_tail()
    return t


class Agents:
    """One `strata agent` per simulated node, each with its own RAM directory
    and port; node 0's agent also serves coordination."""

    def __init__(self, root: Path, nodes: int, args=(), env=None):
        self.root = root
        self.ports = free_ports(nodes)
        self.secret = root / "secret"
        self.secret.write_text("python-tests-%s\n" % os.urandom(16).hex())
        self.secret.chmod(0o600)
        self.procs = [None] * nodes
        # More arguments for every agent; "{node}" is its rank, "{metrics}" a
        # port of its own (for --metrics 127.0.0.1:{metrics}).
        self.args = list(args)
        self.metrics_ports = (free_ports(nodes) if any("{metrics}" in a for a in self.args)
                              else [])
        self.coordinator = True  # False: no --coordinator (only node 0 coordinates then)
        self.env = dict(os.environ, **(env or {}))

    def dir(self, node: int) -> Path:
        return self.root / f"node{node}"

    def address(self, node: int) -> str:
        return f"127.0.0.1:{self.ports[node]}"

    def socket(self, node: int) -> str:
        """The node's agent's local socket: how `strata` on the node reaches
        it without the secret (`strata run` reports restarts only there)."""
        return str(self.dir(node) / ".strata-agent" / "agent.sock")

    def log(self, node: int) -> str:
        return (self.root / f"agent{node}.log").read_text(errors="replace")

    def _arg(self, arg: str, node: int) -> str:
        arg = arg.replace("{node}", str(node))
        return arg.replace("{metrics}", str(self.metrics_ports[node])) if self.metrics_ports else arg

    def start(self, node: int) -> None:
        self.dir(node).mkdir(parents=True, exist_ok=True)
        coordinator = ["--coordinator", self.address(0)] if self.coordinator else []
        with open(self.root / f"agent{node}.log", "a") as log:
            self.procs[node] = subprocess.Popen(
                [STRATA_BIN, "agent", "--local-dir", str(self.dir(node)),
                 "--listen", self.address(node), *coordinator,
                 "--secret-file", str(self.secret), "--grace-seconds", "20",
                 *[self._arg(a, node) for a in self.args]],
                stdout=log, stderr=log, env=self.env)
        _children.append(self.procs[node])
        deadline = time.monotonic() + 10
        while "listening on" not in self.log(node):
            assert self.procs[node].poll() is None, self.log(node)
            assert time.monotonic() < deadline, self.log(node)
            time.sleep(0.02)

    def metric(self, node: int, series: str) -> float:
        """The value of `series` (a name with its labels, as the text format
        writes it) on the node's --metrics endpoint; 0 when absent."""
        url = f"http://127.0.0.1:{self.metrics_ports[node]}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(series + " "):
                    return float(line.split()[-1])
        return 0.0

    def status(self, node: int) -> dict:
        """`strata status --json` of the node's agent."""
        out = subprocess.run([STRATA_BIN, "status", "--agent", self.address(node),
                              "--secret-file", str(self.secret), "--json"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stdout + out.stderr
        return json.loads(out.stdout)

    def kill(self, node: int) -> None:
        self.procs[node].send_signal(signal.SIGKILL)
        self.procs[node].wait()

    def stop(self) -> None:
        """Stops every agent at once: SIGINT. (SIGTERM would drain first, up
        to --grace-seconds while a job is served, which an ended test does
        not need.)"""
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in self.procs:
            if p is not None:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


@pytest.fixture
def agents(scratch):
    """agents(n) starts n agents under the scratch directory; with
    `running`, only the first `running` of them (a.start(node) starts another)."""
    started = []

    def start(nodes: int, args=(), env=None, running=None) -> Agents:
        a = Agents(scratch, nodes, args, env)
        started.append(a)  # stopped at teardown even if a later node fails to start
        for node in range(nodes if running is None else running):
            a.start(node)
        return a

    yield start
    for a in started:
        a.stop()
