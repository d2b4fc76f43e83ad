"""The runner's bound on the steps a fault may lose: the backup then
uploading, read from the coordinator's log, and the restart two faults
share."""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(__file__))
import bounds  # noqa: E402
import chaos  # noqa: E402
import chaos_job  # noqa: E402


class Job:
    """The part of chaos_job.Job the bound reads: each node's agent log."""

    def __init__(self, dir, logs):
        self.dir = dir
        self.nodes = len(logs)
        for n, text in enumerate(logs):
            with open(self.log("agent", n), "w") as f:
                f.write(text)

    def log(self, what, n):
        return os.path.join(self.dir, "%s%d.log" % (what, n))


def line(second, text, level="info"):
    return "2026-11-27T10:00:%06.3fZ %s strata: job chaos: %s\n" % (second, level, text)


def test_a_backup_uploads_from_its_begin_to_its_commit_or_the_next_begin_or_round(tmp_path):
    job = Job(tmp_path, [
        line(1, "backup b1 of step 100 begins (8 part(s))") +
        line(3, "backup b1 of step 100 committed (33557968 bytes)") +
        line(4, "backup b2 of step 200 begins (8 part(s))") +
        line(5, "backup b3 of step 300 begins (8 part(s))") +  # b2 was abandoned
        line(7, "round 4 begins (node 2 registered)") +          # so is b3
        line(8, "backup b4 of step 400 begins (8 part(s))"),
        # another node's agent: its part of b1, which ends nothing
        "2026-11-27T10:00:02.000Z info strata: backup b1: uploaded part 1 (step 100)\n",
    ])
    uploads = bounds.backup_uploads(bounds.backup_events(job))
    base = uploads[0][0] - 1
    assert [(b - base, e - base if e else None) for b, e, _ in uploads] == [
        (1, 3), (4, 5), (5, 7), (8, None)]
    # 20 ms a step: 50 steps a second since the upload in flight began.
    assert bounds.steps_uploading(uploads, base + 2) == 50
    assert bounds.steps_uploading(uploads, base + 3.5) == 0   # none in flight
    assert bounds.steps_uploading(uploads, base + 6) == 50
    assert bounds.steps_uploading(uploads, base + 10) == 100  # b4 never committed
    # The watermark began b4 (step 400) with training at 480 (one save
    # interval is 25 steps): at second 9, 50 steps later, 530 was trained,
    # and b4's step lies 130 behind, 105 beyond the base bound's interval.
    assert bounds.steps_uploading(uploads, base + 9, 530) == 105
    assert bounds.steps_uploading(uploads, base + 9, 440) == 50  # within an interval


def test_faults_that_share_a_restart_share_the_larger_bound():
    records = [{"applied": 100.0, "recovery_s": 27.0},  # a crash loop
               {"applied": 111.0, "recovery_s": 15.0},  # a partition within it
               {"applied": 200.0, "recovery_s": 2.0},   # later, on its own
               {"applied": 201.0}]                       # no restart of its own
    out = [{"bound": 525}, {"bound": 50}, {"bound": 50}, {}]
    bounds.share_restart_bounds(records, out)
    assert [o.get("bound") for o in out] == [525, 525, 50, None]


def test_a_stall_within_reach_of_the_fallback_counts_where_it_lies():
    # The first soak of seed 1: a full RAM disk from step 8,100 to 9,100
    # (and two save intervals after) froze the watermark, so no backup of
    # 8,500 was taken; a crash loop later poisoned step 9,025, the next
    # backup, and the job fell back to the backup of step 8,000.
    stalls = [(8100, 9150)]
    assert bounds.stalled_within(stalls, 9916, 1025) == 1050  # all of it: the reach grows
    assert bounds.stalled_within(stalls, 9916, 800) == 1050   # touched at its end: all of it
    assert bounds.stalled_within(stalls, 9916, 700) == 0      # not touched
    assert bounds.stalled_within(stalls, 11000, 1025) == 0    # out of reach
    assert bounds.stalled_within([(9000, 12000)], 9916, 50) == 916  # in force: up to the fault
    assert bounds.stalled_within([], 9916, 1025) == 0


def test_committed_backup_steps_come_from_the_coordinators_log(tmp_path):
    job = Job(tmp_path, [
        line(1, "backup b1 of step 100 begins (8 part(s))") +
        line(3, "backup b1 of step 100 committed (33557968 bytes)") +
        line(4, "backup b2 of step 200 begins (8 part(s))"),
        line(9, "backup b3 of step 300 committed (33557968 bytes)"),
    ])
    assert bounds.committed_steps(bounds.backup_events(job)) == {100, 300}


def test_a_failed_backup_pauses_the_backups_for_the_retry_time(tmp_path):
    # Seed 52 of rs(6,2): a part failed under s3_errors, so no backup began
    # for 30 s; a crash loop then poisoned the step restored, and the job
    # fell back to the backup committed before the one that failed.
    job = Job(tmp_path, [
        line(0.5, "backup b0 of step 40 committed (33557968 bytes)") +
        line(1, "backup b1 of step 100 begins (8 part(s))") +
        line(2, "backup b1: node 7: uploading part 7: SlowDown; it stays incomplete", "error") +
        line(40, "cannot begin a backup: listing s3://b/chaos: 503", "error") +
        line(41, "backup b2 of step 500 begins (8 part(s))"),
        # an agent's own error about a part is not the coordinator's
        "2026-11-27T10:00:02.000Z error strata: backup b1: part 7 failed; it stays incomplete\n",
    ])
    events = bounds.backup_events(job)
    assert [k for _, k, _, _ in sorted(events)] == [
        "committed", "begins", "failed", "failed", "begins"]
    uploads = bounds.backup_uploads(events)
    base = uploads[0][0] - 1
    assert [(b - base, e - base if e else None) for b, e, _ in uploads] == [(1, 2), (41, None)]
    # A fault at second 12, step 2,000 trained: no backup since step 40.
    assert bounds.retry_pauses(events, base + 12, 2000) == [(40, 2000)]
    # At second 60: the backups resumed with step 500 at second 41.
    assert bounds.retry_pauses(events, base + 60, 5000) == [(40, 500), (40, 500)]
    assert bounds.stalled_within(bounds.retry_pauses(events, base + 12, 2000), 2000, 225) == 1960


def test_a_restart_between_a_failed_backup_and_the_next_leaves_no_gap(tmp_path):
    # The job rolled back below the failed backup's step: the next backup,
    # of an older step, is the fallback's successor, and nothing is missing.
    job = Job(tmp_path, [
        line(0.5, "backup b0 of step 90 committed (33557968 bytes)") +
        line(1, "backup b1 of step 100 begins (8 part(s))") +
        line(2, "backup b1: node 7: uploading part 7: SlowDown; it stays incomplete", "error") +
        line(5, "round 4 begins (node 2 registered)") +
        line(40, "backup b2 of step 80 begins (8 part(s))"),
    ])
    events = bounds.backup_events(job)
    base = min(t for t, _, _, _ in events) - 1
    assert bounds.retry_pauses(events, base + 50, 600) == []


def test_stalls_that_overlap_count_once():
    assert bounds.stalled_within([(0, 100), (50, 150)], 150, 10) == \
        bounds.stalled_within([(0, 150)], 150, 10)
    assert bounds.stalled_within([(100, 140), (100, 140)], 150, 20) == 40


def test_a_stall_in_force_through_a_restart_counts_from_the_step_resumed():
    # The eighth soak run of seed 1000: a disk filled while the job
    # restarted; the status still reported step 47,050, the job resumed from
    # 47,000 and trained those 50 steps again with the disk full.
    class Bed:
        pass

    class Job:
        bed = Bed()

    faults = chaos.Faults(Job(), print)
    faults.full = {6: 1}
    faults.full_since = 47050
    faults.slowed = {3: 1}
    faults.slow_since = 46990  # began before the step resumed: stays
    faults.stalls = [(47020, 47100)]  # healed before the job resumed: untouched
    faults._stalls_resumed_from(47000)
    assert faults.full_since == 47000
    assert faults.slow_since == 46990
    assert faults.stalls == [(47020, 47100)]


def test_a_fault_that_begins_while_the_job_restarts_begins_at_the_step_trained_before():
    # The eighth soak run of seed 1000: a slow link began while every
    # trainer was down, the status gave no step, and the stall counted from
    # step -1: every later bound took in the whole run (57,753 steps).
    class Job:
        bed = None
        step = -1

        def training_step(self):
            return self.step

    job = Job()
    faults = chaos.Faults(job, print)
    assert faults.step_now() == 0  # not started yet
    job.step = 36480
    assert faults.step_now() == 36480
    job.step = -1  # down, the restart not yet noticed: the last step reported
    assert faults.step_now() == 36480
    faults.recovering = [{"before": 36400}, {"before": 36470}]
    assert faults.step_now() == 36470
    job.step = 36300  # resumed from an older step
    assert faults.step_now() == 36300


def test_the_training_step_is_read_from_every_node_at_once():
    # rs(6,2) seed 153: read one node after another, each `strata status`
    # taking about 0.3 s, the steps read were 729, 759, ... 845: the job
    # trained on while the runner read it.
    class Job:
        nodes = 4
        reports = [{"training_step": 780}, {}, {"training_step": 790},
                   {"training_step": -1}]

        together = threading.Barrier(4, timeout=30)  # broken unless all four read at once

        def status(self, n):
            self.together.wait()
            return self.reports[n]

    job = Job()
    assert chaos_job.Job.training_step(job) == 790
    assert job.steps_read == [780, -1, 790, -1]
    job.reports = [{}, {"training_step": -1}, {}, {}]
    assert chaos_job.Job.training_step(job) == -1


def test_a_start_counts_unless_it_ended_on_the_poison(tmp_path):
    # rs(6,2) seed 153: a partition's restart resumed from 775; a crash loop
    # poisoned 775 afterwards, and its runs ended at once on it until the
    # quarantine, after which the job resumed from 700.
    job = Job(tmp_path, ["", ""])
    for n, text in enumerate([
            "fresh start\nrestored step=775\nrestored step=775\n"
            "toy-trainer: step 775 is poisoned (/p): exiting 1\nrestored step=700\n",
            "fresh start\nrestored step=775\n"]):
        with open(job.log("run", n), "w") as f:
            f.write(text)
    assert chaos_job.Job.starts(job) == {0: [None, 775, 775, 700], 1: [None, 775]}
    assert chaos_job.Job.failed_on_poison(job) == {0: [False, False, True, False],
                                              1: [False, False]}
    # The partition came after the fresh starts; the crash loop after the
    # partition's restart. Each resumed from the first start after it that
    # did not end on the poison.
    job.poison = os.path.join(tmp_path, "poison")
    with open(job.poison, "w") as f:
        f.write("775\n")
    job.starts = lambda: chaos_job.Job.starts(job)
    job.failed_on_poison = lambda: chaos_job.Job.failed_on_poison(job)

    class Applier:
        records = [
            {"kind": "partition", "nodes": [1], "at": 20, "applied": 1000.0, "before": 802,
             "starts": {0: [None], 1: [None]}, "away": 0, "recovery_s": 30.0},
            {"kind": "crash_loop", "nodes": [], "at": 53, "applied": 1033.0, "before": 802,
             "starts": {0: [None, 775], 1: [None, 775]}, "away": 0, "recovery_s": 10.0}]

    partition, crash_loop = bounds.summarize(job, Applier())
    assert (partition["resumed"], partition["lost_steps"]) == (775, 27)
    assert (crash_loop["resumed"], crash_loop["lost_steps"]) == (700, 102)


def test_the_bound_counts_from_the_slowest_rank(tmp_path):
    # rs(6,2) seed 161, two runs on the host: the ranks read 1,020 to 1,048
    # when node 1 was lost; the slowest had saved 1,000, whose coding was
    # still under way, and the job resumed from 975.
    job = Job(tmp_path, ["", ""])
    for n in range(2):
        with open(job.log("run", n), "w") as f:
            f.write("fresh start\nrestored step=975\n")
    job.poison = os.path.join(tmp_path, "poison")

    class Applier:
        records = [{"kind": "lose_node", "nodes": [1], "at": 24.6, "applied": 1000.0,
                    "before": 1048, "steps_read": [1048, 1020], "starts": {0: [None], 1: [None]},
                    "away": 1}]

    (lost,) = bounds.summarize(job, Applier())
    assert (lost["lost_steps"], lost["bound"]) == (73, 2 * bounds.INTERVAL + 28)
    # Read while the job restarted, the ranks' spread says nothing.
    Applier.records[0]["restarting"] = True
    (lost,) = bounds.summarize(job, Applier())
    assert lost["bound"] == 2 * bounds.INTERVAL
    assert bounds.rank_spread(1048, [-1, 1030, 1048]) == 18  # a rank not reporting: none
    assert bounds.rank_spread(1048, [-1, -1]) == 0
    assert bounds.rank_spread(1048, []) == 0


def test_a_backup_in_flight_counts_from_when_the_fault_struck(tmp_path):
    # rs(6,2) seed 181: the runner read every node's step (0.3 s and more),
    # the backup of 600 began, and 50 ms later the crash loop killed the
    # trainers; counted from before the reads, no backup was in flight.
    job = Job(tmp_path, [line(23.349, "backup b1 of step 600 begins (8 part(s))"), ""])
    for n in range(2):
        with open(job.log("run", n), "w") as f:
            f.write("fresh start\nrestored step=500\n")
    job.poison = os.path.join(tmp_path, "poison")
    job.starts = lambda: chaos_job.Job.starts(job)
    job.failed_on_poison = lambda: chaos_job.Job.failed_on_poison(job)
    base = bounds.backup_uploads(bounds.backup_events(job))[0][0] - 23.349

    class Applier:
        records = [{"kind": "crash_loop", "nodes": [], "at": 23, "applied": base + 23.0,
                    "struck": base + 23.9, "before": 647, "starts": {0: [None], 1: [None]},
                    "away": 0, "recovery_s": 4.0}]

    entry, = bounds.summarize(job, Applier())
    # The backup interval and a save in flight, plus 0.55 s at 50 steps a second.
    assert (entry["lost_steps"], entry["bound"]) == (147, 153)


def test_a_crash_loop_whose_job_started_fresh_leaves_no_poison_armed(tmp_path):
    # rs(6,2) seed 186: the job had nothing to restore after a crash loop;
    # its "next" stayed armed and broke a partition's restore 13 s later.
    job = Job(tmp_path, ["", ""])
    job.poison = os.path.join(tmp_path, "poison")
    with open(job.poison, "w") as f:
        f.write("100\nnext\n")
    for n in range(2):
        with open(job.log("run", n), "w") as f:
            f.write("fresh start\nrestored step=100\nfresh start\n")
    job.starts = lambda: chaos_job.Job.starts(job)
    job.bed = None
    faults = chaos.Faults(job, print)
    faults.recovering = [{"kind": "crash_loop", "applied": 0.0, "before": 96,
                          "starts": {0: [None, 100], 1: [None, 100]}}]
    faults.note_recoveries()
    assert faults.recovering == []
    with open(job.poison) as f:
        assert f.read().split() == ["100"]


def test_a_backup_carried_into_a_round_uploads_on_until_it_commits_or_is_abandoned(tmp_path):
    # rs(6,2) seed 62: the backup of step 1,200 went on into rounds 2 and 3,
    # and round 3 abandoned it; the runner had ended it at round 2.
    job = Job(tmp_path, [
        line(1, "backup b1 of step 1200 begins (8 part(s))") +
        line(2, "round 2 begins (node 5 registered)") +
        line(2, "backup b1 of step 1200 goes on into round 2 if its plan restores step 1200 or "
                "later") +
        line(4, "round 3 begins (node 1 registered)") +
        line(4, "backup b1 of step 1200 goes on into round 3 if its plan restores step 1200 or "
                "later") +
        "2026-11-27T10:00:17.000Z info strata: job chaos round 3: backup b1 of step 1200 "
        "abandoned: the round restores step 1100\n" +
        line(20, "backup b2 of step 1300 begins (8 part(s))") +
        line(21, "round 4 begins (node 2 registered)"),  # not carried: ends b2
    ])
    uploads = bounds.backup_uploads(bounds.backup_events(job))
    base = uploads[0][0] - 1
    assert [(b - base, e - base if e else None) for b, e, _ in uploads] == [(1, 17), (20, 21)]
    assert bounds.steps_uploading(uploads, base + 4) == 150
