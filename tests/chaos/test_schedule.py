"""Fault schedules: reproducible from their seed, within the run, on real
nodes, with overlaps."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import schedule  # noqa: E402


def test_the_same_seed_gives_the_same_schedule():
    a = schedule.make(17, nodes=8, seconds=600)
    assert a == schedule.make(17, nodes=8, seconds=600)
    assert schedule.format(17, a) == schedule.format(17, schedule.make(17, 8, 600))
    assert a != schedule.make(18, nodes=8, seconds=600)


def test_faults_fall_within_the_run_and_hit_real_nodes():
    for seed in range(50):
        faults = schedule.make(seed, nodes=4, seconds=300)
        assert [f.at for f in faults] == sorted(f.at for f in faults)
        for f in faults:
            assert 0 <= f.at < 300
            assert all(0 <= n < 4 for n in f.nodes) and len(set(f.nodes)) == len(f.nodes)
            if f.kind == "partition":
                assert 1 <= len(f.nodes) <= 2
            if f.kind.startswith("kill_") or f.kind.startswith("maintenance"):
                assert f.seconds == 0


def test_every_kind_occurs_and_faults_overlap():
    seen, overlaps = set(), 0
    for seed in range(100):
        faults = schedule.make(seed, nodes=4, seconds=600)
        seen |= {f.kind for f in faults}
        overlaps += schedule.overlapping(faults)
    assert seen == set(schedule.KINDS)
    assert overlaps > 0


def test_kinds_can_be_chosen_and_unknown_ones_are_refused():
    faults = schedule.make(3, nodes=4, seconds=600, kinds=["partition", "kill_agent"])
    assert {f.kind for f in faults} <= {"partition", "kill_agent"}
    with pytest.raises(ValueError, match="unknown fault kind 'kill_everything'"):
        schedule.make(3, nodes=4, seconds=60, kinds=["kill_everything"])
