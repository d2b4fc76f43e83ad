"""Fault schedules generated from a seed.

The same (seed, nodes, seconds, kinds) always gives the same schedule, and
format() prints it so a failing run can be replayed exactly. Faults arrive
as a Poisson process (mean gap `mean_gap` seconds); each lasts a while
(partitions, slow links and S3 trouble heal at the end; a kill is over at
once, the supervisor or the bed restarts what it killed), and with
probability `overlap` the next fault starts while the previous one lasts.
"""
import dataclasses
import random

# What can go wrong, and on how many nodes (0: not a node fault).
KINDS = {
    "kill_trainer": 1,        # kill -9 of one node's training process
    "kill_agent": 1,          # kill -9 of one node's agent (its RAM stays)
    "kill_coordinator": 0,    # kill -9 of node 0's agent, the coordinator
    "kill_supervisor": 1,     # kill -9 of one node's `strata run`
    "lose_node": 1,           # a node and its RAM gone, back after the fault
    "replace_node": 1,        # a node gone for good, a new empty one in its place
    "partition": -1,          # one node or a group cut off, healed at the end
    "slow_link": 1,           # one node's link at 1/100 of its rate
    "s3_unavailable": 0,      # the backup store refuses connections
    "s3_errors": 0,           # the backup store answers 500/503 to some requests
    "s3_slow": 0,             # the backup store answers slowly
    "disk_full": 1,           # a node's RAM disk fills up
    "maintenance": 1,         # `strata maintenance` on one node
    "maintenance_lose_ram": 1,  # the same with --lose-ram
    "crash_loop": 0,          # the restored step makes every trainer crash
}
# How long a fault lasts, in seconds (kills are instantaneous).
DURATION = {"partition": (5, 30), "slow_link": (10, 40), "s3_unavailable": (5, 30),
            "s3_errors": (10, 40), "s3_slow": (10, 40), "disk_full": (5, 20),
            "lose_node": (5, 20)}


@dataclasses.dataclass(frozen=True)
class Fault:
    at: float            # seconds from the start of the run
    kind: str
    nodes: tuple         # the node ranks it hits (empty: the job or S3)
    seconds: float       # how long it lasts (0: instantaneous)

    def __str__(self):
        where = "nodes " + ",".join(map(str, self.nodes)) if self.nodes else "job"
        lasts = " for %.1f s" % self.seconds if self.seconds else ""
        return "t=%6.1f s  %-20s %s%s" % (self.at, self.kind, where, lasts)


def make(seed, nodes, seconds, kinds=None, mean_gap=20.0, overlap=0.3):
    """The schedule of `seed`: faults in [0, seconds) on a job of `nodes`."""
    if nodes < 2:
        raise ValueError("a chaos run needs at least 2 nodes")
    kinds = sorted(kinds or KINDS)
    for k in kinds:
        if k not in KINDS:
            raise ValueError("unknown fault kind %r (known: %s)" % (k, ", ".join(sorted(KINDS))))
    rng = random.Random("strata-chaos:%d:%d:%s" % (seed, nodes, ",".join(kinds)))
    faults = []
    t = rng.expovariate(1.0 / mean_gap)
    while t < seconds:
        kind = rng.choice(kinds)
        count = KINDS[kind]
        if count < 0:  # a group: one node up to half the job
            count = rng.randint(1, max(1, nodes // 2))
        hit = tuple(sorted(rng.sample(range(nodes), count))) if count else ()
        low, high = DURATION.get(kind, (0, 0))
        lasts = round(rng.uniform(low, high), 1) if high else 0.0
        faults.append(Fault(round(t, 1), kind, hit, lasts))
        if lasts and rng.random() < overlap:
            t += rng.uniform(0, lasts)  # the next one while this one lasts
        else:
            t += lasts + rng.expovariate(1.0 / mean_gap)
    return faults


def overlapping(faults):
    """How many faults start while an earlier one still lasts."""
    n = 0
    for i, f in enumerate(faults):
        if any(g.at <= f.at < g.at + g.seconds for g in faults[:i]):
            n += 1
    return n


def format(seed, faults):  # noqa: A001 (the module's printer)
    lines = ["seed %d: %d fault(s), %d overlapping" % (seed, len(faults), overlapping(faults))]
    lines += ["  " + str(f) for f in faults]
    return "\n".join(lines)
