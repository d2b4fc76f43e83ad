"""A multi-host test bed on one machine: one network namespace per host.

Each host (the job's nodes, S3, ...) gets a namespace with loopback up and
one interface, eth0, with its own address. eth0 is one end of a veth pair;
the other end is a port of a bridge in the root namespace, which holds the
bed's first address (so the harness, in the root namespace, reaches every
host). Both directions of every link are shaped with tbf (`rate`), as a
NIC of that speed would shape them; this kernel has no netem, so delay and
loss are not modelled here.

Faults on the network:
  * partition(hosts): the hosts move to a bridge of their own: they reach
    each other but nothing else (one host alone is cut off completely);
    heal() puts every host back;
  * slow(host, rate): the host's link at another rate (both directions);
    unslow(host) restores the bed's rate.

Every name the bed creates starts with its tag (stc + 3 hex digits), and
the bed records its pid under /run/strata-netbed/<tag>; sweep() removes
what a bed whose process is gone left behind (one killed with -9), never a
live bed's. A bed is a
context manager: on exit (also on an exception) every process started in
its namespaces is killed and every namespace, link and bridge it made is
removed. Needs root.
"""
import ipaddress
import os
import signal
import subprocess
import time

TAG_PREFIX = "stc"
OWNERS = "/run/strata-netbed"
TAG_LEN = len(TAG_PREFIX) + 3


def _run(*argv, check=True):
    r = subprocess.run(list(argv), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(argv), r.returncode, r.stderr.strip()))
    return r


def _alive(tag):
    """Whether the process that made bed `tag` still runs."""
    try:
        with open(os.path.join(OWNERS, tag)) as f:
            pid = int(f.read())
        os.kill(pid, 0)
        return True
    except (OSError, ValueError):
        return False


def sweep():
    """Removes the namespaces, links and bridges of beds whose process is
    gone (a harness killed with -9); returns how many names went."""
    removed = 0
    for line in _run("ip", "netns", "list").stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(TAG_PREFIX) and not _alive(name[:TAG_LEN]):
            _kill_namespace(name)
            _run("ip", "netns", "del", name, check=False)
            removed += 1
    for line in _run("ip", "-o", "link", "show").stdout.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            dev = parts[1].strip().split("@")[0]
            if dev.startswith(TAG_PREFIX) and not _alive(dev[:TAG_LEN]):
                _run("ip", "link", "del", dev, check=False)
                removed += 1
    if os.path.isdir(OWNERS):
        for tag in os.listdir(OWNERS):
            if not _alive(tag):
                try:
                    os.unlink(os.path.join(OWNERS, tag))
                except FileNotFoundError:
                    pass  # its owner removed it meanwhile
    return removed


def _pid_file(name):
    """OWNERS/<name>.<pid>, holding this process's pid (never seen empty:
    link or rename it into place)."""
    os.makedirs(OWNERS, exist_ok=True)
    path = os.path.join(OWNERS, ".%s.%d" % (name, os.getpid()))
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    return path


def _kill_namespace(ns):
    pids = _run("ip", "netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


class NetBed:
    """Hosts named by the caller ("n0", "n1", "s3", ...), each with an address."""

    def __init__(self, hosts, rate="1gbit", burst="256kb"):
        # 10.213.X.0/24, X claimed under OWNERS so that concurrent beds never
        # share a subnet (see _claim_subnet); the tag names X too, so they
        # never share a name either.
        self.subnet = self._claim_subnet()
        self.net = ipaddress.ip_network("10.213.%d.0/24" % self.subnet)
        self.tag = "%s%03x" % (TAG_PREFIX, self.subnet)
        self.hosts = list(hosts)
        self.rate = rate
        self.burst = burst
        self.bridge = self.tag + "br"
        self.island = self.tag + "bp"  # the partitioned hosts' bridge
        self.gateway = str(self.net.network_address + 1)
        self._index = {h: i for i, h in enumerate(self.hosts)}  # names the host's veth
        self._addr = {h: str(self.net.network_address + 10 + i) for i, h in enumerate(self.hosts)}
        self._procs = []
        self._made = False

    # --- set-up and tear-down ------------------------------------------------------------

    @staticmethod
    def _claim_subnet():
        """The first X from the pid whose OWNERS/net<X> this process claims.
        A claim is made by linking a file that already holds the pid, so no
        one ever reads it empty; a claim whose process is gone is taken
        over."""
        mine = _pid_file("claim")
        try:
            start = os.getpid() % 250
            for i in range(250):
                x = (start + i) % 250
                name = "net%d" % x
                for _ in range(2):
                    try:
                        os.link(mine, os.path.join(OWNERS, name))
                        return x
                    except FileExistsError:
                        if _alive(name):
                            break
                        try:
                            os.unlink(os.path.join(OWNERS, name))  # its process is gone
                        except FileNotFoundError:
                            pass
            raise RuntimeError("no free subnet 10.213.X.0/24 for a test bed (see %s)" % OWNERS)
        finally:
            os.unlink(mine)

    def _release_subnet(self):
        try:
            os.unlink(os.path.join(OWNERS, "net%d" % self.subnet))
        except FileNotFoundError:
            pass

    def __enter__(self):
        self.up()
        return self

    def __exit__(self, *exc):
        self.down()
        return False

    def ns(self, host):
        return "%s-%s" % (self.tag, host)

    def veth(self, host):
        return "%sh%d" % (self.tag, self._index[host])

    def address(self, host):
        return self._addr[host]

    def up(self):
        if os.geteuid() != 0:
            raise PermissionError("the network test bed needs root (namespaces, veth, tc)")
        self._made = True
        # Names of a dead bed that had this subnet (and so this tag) go
        # first; a live bed's are never touched.
        sweep()
        os.replace(_pid_file(self.tag), os.path.join(OWNERS, self.tag))
        for bridge in (self.bridge, self.island):
            _run("ip", "link", "add", bridge, "type", "bridge")
            _run("ip", "link", "set", bridge, "up")
        _run("ip", "addr", "add", "%s/%d" % (self.gateway, self.net.prefixlen), "dev", self.bridge)
        for host in self.hosts:
            self._add_host(host)

    def _add_host(self, host):
        ns, outside = self.ns(host), self.veth(host)
        inside = outside + "n"
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        _run("ip", "link", "set", inside, "netns", ns)
        _run("ip", "-n", ns, "link", "set", inside, "name", "eth0")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("ip", "-n", ns, "addr", "add",
             "%s/%d" % (self.address(host), self.net.prefixlen), "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("ip", "-n", ns, "route", "add", "default", "via", self.gateway)
        _run("ip", "link", "set", outside, "master", self.bridge)
        _run("ip", "link", "set", outside, "up")
        self._shape(host, self.rate, "add")

    def add_host(self, host, address=None):
        """Adds a host to a bed that is up, at `address` (one a removed host
        had, say) or the next free one."""
        self._index[host] = len(self._index)
        self._addr[host] = address or str(self.net.network_address + 10 + self._index[host])
        self.hosts.append(host)
        self._add_host(host)

    def remove_host(self, host):
        """The host is gone: every process in it killed, its namespace and
        link removed."""
        _kill_namespace(self.ns(host))
        _run("ip", "netns", "del", self.ns(host), check=False)
        _run("ip", "link", "del", self.veth(host), check=False)
        self.hosts.remove(host)

    def _shape(self, host, rate, verb):
        spec = ["root", "tbf", "rate", rate, "burst", self.burst, "latency", "50ms"]
        _run("ip", "netns", "exec", self.ns(host), "tc", "qdisc", verb, "dev", "eth0", *spec)
        _run("tc", "qdisc", verb, "dev", self.veth(host), *spec)

    def down(self):
        """Kills what runs in the bed and removes all it made. Idempotent."""
        for p in self._procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self._procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._procs = []
        if not self._made:
            self._release_subnet()
            return
        for host in self.hosts:
            _kill_namespace(self.ns(host))
            _run("ip", "netns", "del", self.ns(host), check=False)
            _run("ip", "link", "del", self.veth(host), check=False)
        for bridge in (self.bridge, self.island):
            _run("ip", "link", "del", bridge, check=False)
        try:
            os.unlink(os.path.join(OWNERS, self.tag))
        except FileNotFoundError:
            pass
        self._release_subnet()
        self._made = False

    # --- processes ------------------------------------------------------------------------

    def spawn(self, host, argv, log=None, env=None):
        """Starts argv on `host` in a session of its own; the bed kills it at
        the end if it still runs."""
        out = open(log, "ab") if log else subprocess.DEVNULL
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(host), *argv], stdout=out,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                             start_new_session=True)
        self._procs.append(p)
        return p

    def run(self, host, argv, timeout=60):
        """Runs argv on `host` to completion: (exit code, output)."""
        r = subprocess.run(["ip", "netns", "exec", self.ns(host), *argv], capture_output=True,
                           text=True, timeout=timeout)
        return r.returncode, r.stdout + r.stderr

    # --- faults ---------------------------------------------------------------------------

    def partition(self, hosts):
        """Cuts `hosts` off from the rest: they keep reaching each other."""
        for host in hosts:
            _run("ip", "link", "set", self.veth(host), "master", self.island)

    def heal(self):
        for host in self.hosts:
            _run("ip", "link", "set", self.veth(host), "master", self.bridge)

    def slow(self, host, rate):
        self._shape(host, rate, "change")

    def unslow(self, host):
        self._shape(host, self.rate, "change")

    def reachable(self, src, dst, port, timeout=1.0):
        """Whether a TCP connection from `src` to dst:port succeeds (something
        must listen there)."""
        code = ("import socket,sys\n"
                "s=socket.socket(); s.settimeout(%r)\n"
                "sys.exit(0 if s.connect_ex((%r,%d))==0 else 1)\n" % (timeout, self.address(dst),
                                                                     port))
        rc, _ = self.run(src, ["python3", "-c", code], timeout=timeout + 10)
        return rc == 0


def wait_for(predicate, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
