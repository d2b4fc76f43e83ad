"""128 real agents on loopback with the Orbax test client (64 KiB a node):
a fresh start, a restart from the nodes' own stores, a node lost with its
RAM and restored from its peer, node 0 — the coordinator's — lost the same
way, and node 0 lost again in the middle of a round, while the 127 others
wait in it. Every round must form (a registration retried under load keeps
its round) and every node must get its own bytes back."""

import shutil
import time

from conftest import on_every_node
from replicator_clients import OrbaxClient, step_bytes

NODES = 128
SLICES = 2
JOB = "scale"
SIZE = 64 << 10


def content(node: int, step: int) -> bytes:
    return step_bytes(JOB, node % (NODES // SLICES), step, SIZE)


def round_of_starts(agents, steps):
    """Every node's client starts at once, then saves `steps`; returns what
    each restored, with its bytes."""
    def run(node):
        c = OrbaxClient(agents.dir(node), JOB, NODES, num_slices=SLICES)
        restored = c.initialize(timeout=300)
        data = c.read(restored) if restored is not None else None
        for step in steps:
            c.save(step, content(node, step))
        return restored, data
    return on_every_node(NODES, run)


def wait_replicated(agents, step: int, timeout: float = 300) -> None:
    """Until every node's `step` is on its peer (the agents' logs say so)."""
    deadline = time.monotonic() + timeout
    missing = set(range(NODES))
    while missing:
        logs = "".join(agents.log(n) for n in range(NODES))
        missing = {n for n in missing if f"holding replica {JOB}/{n}/{step} " not in logs}
        assert time.monotonic() < deadline, f"step {step} of nodes {sorted(missing)[:10]} unreplicated"
        time.sleep(0.5)


def lose(agents, node: int) -> None:
    agents.kill(node)
    shutil.rmtree(agents.dir(node))
    agents.start(node)


def check(results, step: int) -> None:
    for node, (restored, data) in enumerate(results):
        assert restored == step, (node, restored)
        assert data == content(node, step), f"node {node}: restored bytes differ"


def test_128_agents_fresh_start_restart_and_lost_nodes(agents):
    nodes = agents(NODES, args=["--node-rank", "{node}"])
    assert all(r == (None, None) for r in round_of_starts(nodes, [10]))
    wait_replicated(nodes, 10)
    check(round_of_starts(nodes, [20]), 10)
    wait_replicated(nodes, 20)
    lose(nodes, 77)
    check(round_of_starts(nodes, []), 20)
    assert f"restored {JOB}/77/20 from " in nodes.log(77)
    lose(nodes, 0)
    check(round_of_starts(nodes, []), 20)
    assert f"restored {JOB}/0/20 from " in nodes.log(0)
    check(start_with_coordinator_lost_mid_round(nodes), 20)
    assert nodes.log(0).count(f"restored {JOB}/0/20 from ") == 2


REGISTERED = "held copies proven unchanged"  # an agent's line at each registration


def start_with_coordinator_lost_mid_round(agents):
    """Every node's client starts but node 0's; once the 127 others have
    registered and wait in the round, node 0 is lost with its RAM and its
    client starts on the replacement. Returns what each restored."""
    before = [agents.log(n).count(REGISTERED) for n in range(NODES)]

    def run(node):
        if node == 0:
            deadline = time.monotonic() + 300
            while any(agents.log(n).count(REGISTERED) <= before[n] for n in range(1, NODES)):
                assert time.monotonic() < deadline, "the other nodes never registered"
                time.sleep(0.2)
            lose(agents, 0)
        c = OrbaxClient(agents.dir(node), JOB, NODES, num_slices=SLICES)
        restored = c.initialize(timeout=300)
        return restored, c.read(restored) if restored is not None else None
    return on_every_node(NODES, run)
