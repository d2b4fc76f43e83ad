"""The network test bed itself: hosts reach each other over the bridge, a
partition cuts exactly the hosts it names off, links are shaped, and
nothing the bed made (namespaces, links, processes) outlives it."""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import netbed  # noqa: E402


def _cannot_make_links():
    """Why this machine cannot host a bed (not root, no CAP_NET_ADMIN), or ""."""
    if os.geteuid() != 0:
        return "needs root"
    probe = "stcprobe%d" % (os.getpid() % 1000)
    r = subprocess.run(["ip", "link", "add", probe, "type", "bridge"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        return "cannot create network links here: " + r.stderr.strip()
    subprocess.run(["ip", "link", "del", probe], capture_output=True)
    return ""


_WHY = _cannot_make_links()
pytestmark = pytest.mark.skipif(bool(_WHY), reason=_WHY or "n/a")

PORT = 7999
LISTEN = ("import socket,time\n"
          "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('0.0.0.0', %d)); s.listen(64)\n"
          "while True:\n"
          "    c,_=s.accept(); c.close()\n" % PORT)


def listen(bed, host):
    p = bed.spawn(host, ["python3", "-c", LISTEN])
    assert netbed.wait_for(lambda: bed.reachable(host, host, PORT), 10), "listener did not start"
    return p


def names():
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return ns + links


def test_a_partition_cuts_off_exactly_the_hosts_it_names():
    with netbed.NetBed(["n0", "n1", "n2"]) as bed:
        listen(bed, "n1")
        assert bed.reachable("n0", "n1", PORT)
        assert bed.reachable("n2", "n1", PORT)
        bed.partition(["n1"])  # alone: cut off from everyone
        assert not bed.reachable("n0", "n1", PORT)
        assert not bed.reachable("n2", "n1", PORT)
        bed.heal()
        assert bed.reachable("n0", "n1", PORT)
        bed.partition(["n0", "n1"])  # a group: still one network inside
        assert bed.reachable("n0", "n1", PORT)
        assert not bed.reachable("n2", "n1", PORT)
        bed.heal()
        assert bed.reachable("n2", "n1", PORT)


def test_links_are_shaped_both_ways_and_can_be_slowed():
    with netbed.NetBed(["n0", "n1"], rate="2gbit") as bed:
        def qdiscs():
            _, inside = bed.run("n0", ["tc", "qdisc", "show", "dev", "eth0"])
            outside = subprocess.run(["tc", "qdisc", "show", "dev", bed.veth("n0")],
                                     capture_output=True, text=True).stdout
            return inside, outside
        for q in qdiscs():
            assert "tbf" in q and "rate 2Gbit" in q, q
        bed.slow("n0", "10mbit")
        for q in qdiscs():
            assert "rate 10Mbit" in q, q
        bed.unslow("n0")
        for q in qdiscs():
            assert "rate 2Gbit" in q, q


def test_nothing_outlives_the_bed():
    bed = netbed.NetBed(["n0", "n1"])
    with bed:
        p = listen(bed, "n0")
        tag = bed.tag
        assert tag in names()
    assert p.poll() is not None, "a process started in the bed survived it"
    assert tag not in names()


def test_sweep_removes_what_a_dead_bed_left_and_spares_a_live_one():
    bed = netbed.NetBed(["n0", "n1"])
    bed.up()
    try:
        bed.spawn("n1", ["sleep", "600"])
        netbed.sweep()
        assert bed.tag in names(), "sweep removed a live bed"
        # The bed's process dies (here: its record names a pid that is gone).
        with open(os.path.join(netbed.OWNERS, bed.tag), "w") as f:
            f.write("999999999")
        assert netbed.sweep() >= 3  # two namespaces, their links, the bridges
        assert bed.tag not in names()
        bed._procs[0].wait(timeout=10)  # killed with its namespace
        assert not os.path.exists(os.path.join(netbed.OWNERS, bed.tag))
    finally:
        bed.down()
