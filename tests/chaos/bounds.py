"""The work each fault of a chaos run may lose, and what it did lose.

chaos.py applies the faults and records, for each, the newest step trained
before it and what was in force then (a full disk, a slow link, S3 down,
nodes away). This module reads the rest from the run's logs (the
coordinator's backup lines, each trainer's starts, the poison file) and
turns both into a bound per fault: what the tiers held when it struck
(summarize). Pure functions of the logs and the records, so
test_bounds.py checks them on logs written by hand.
"""
import datetime
import re

# The chaos job's parameters the bounds depend on (chaos.py runs the job
# with them; BACKUP_EVERY is --backup-every).
STEP_MS = 20         # a training step's length at full speed
INTERVAL = 25        # a periodic checkpoint every INTERVAL steps
BACKUP_EVERY = 100   # a backup every BACKUP_EVERY steps

# Faults after which the job restarts (and restores).
RESTARTS = {"kill_trainer", "kill_supervisor", "lose_node", "replace_node", "maintenance",
            "maintenance_lose_ram", "crash_loop", "partition"}


def read_log(path, start=0):
    """The bytes of `path` from `start`; none if it cannot be read (yet)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read()
    except OSError:
        return b""


BACKUP_EVENT = re.compile(r"^(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z "
                          r"(?:info strata: job \S+(?: round \d+)?: (?:backup (?P<id>\S+) of step "
                          r"(?P<step>\d+) (?P<kind>begins|committed|goes on into round|abandoned)"
                          r"|(?P<round>round) \d+ begins)"
                          r"|error strata: job \S+: (?:.*; it stays incomplete$|cannot begin a backup: "
                          r"|writing the commit of backup ))")


def backup_events(job):
    """The coordinator's backup and round lines of the run, each as
    (wall-clock seconds, "begins" | "committed" | "carried" (into the round
    that begins with it) | "abandoned" | "round" | "failed",
    backup id, step), the id and step None for a round or a failure (after
    which the coordinator begins no backup for 30 s, kRetryAfterFailure)."""
    events = []
    for n in range(job.nodes):
        for line in read_log(job.log("agent", n)).decode(errors="replace").splitlines():
            m = BACKUP_EVENT.match(line)
            if m:
                t = datetime.datetime.fromisoformat(m["time"]).replace(
                    tzinfo=datetime.timezone.utc).timestamp()
                kind = {"goes on into round": "carried"}.get(m["kind"], m["kind"])
                kind = kind or m["round"] or "failed"
                events.append((t, kind, m["id"], int(m["step"]) if m["step"] else None))
    return events


def backup_uploads(events):
    """When each backup of the run began and ended, in wall-clock seconds
    (None: not yet), and its step, from backup_events. A backup ends when it commits or is
    abandoned, or when the next backup, a failure or a new round begins,
    unless the coordinator carried it into that round (its line comes with
    the round's)."""
    events = sorted(events)
    uploads, open_ = [], None  # open_: [began, end, backup id, step] of the latest begun
    for t, kind, backup, step in events:
        if open_ is not None and open_[1] is None:
            mine = backup == open_[2]
            carried = kind == "round" and any(
                k == "carried" and b == open_[2]
                for u, k, b, _ in events if abs(u - t) <= 1.0)
            if (kind in ("begins", "failed") or (kind == "round" and not carried)
                    or (kind in ("committed", "abandoned") and mine)):
                open_[1] = t
        if kind == "begins":
            open_ = [t, None, backup, step]
            uploads.append(open_)
    return [(b, e, step) for b, e, _, step in uploads]


def committed_steps(events):
    """The steps of the backups committed in the run, from backup_events."""
    return {step for _, kind, _, step in events if kind == "committed"}


def retry_pauses(events, applied, before):
    """The gaps in the backups that failures left (from backup_events), as
    (from, to) training steps for stalled_within: from the step of the
    backup committed last before a failure (the fallback: the backups begun
    after it failed, or did not begin) to the step of the first backup
    begun after the failure, which the coordinator's 30 s retry pause put
    off, or to `before` (the step trained at
    wall-clock time `applied`, the fault's) if none began before it.
    Steps, not seconds: a restart in between moves the training step but
    not the backups'."""
    out = []
    events = sorted(e for e in events if e[0] < applied)
    for i, (t, kind, _, _) in enumerate(events):
        if kind != "failed":
            continue
        committed = [step for _, k, _, step in events[:i] if k == "committed"]
        after = [step for _, k, _, step in events[i + 1:] if k == "begins"]
        a = committed[-1] if committed else 0
        b = after[0] if after else before
        if b > a:
            out.append((a, b))
    return out


def stalled_within(stalls, before, reach):
    """The steps of `stalls` ((from, to) training steps, which may overlap)
    that lie within `reach` steps before `before`, the reach growing by what
    it finds: the watermark, and with it the backups, could stand still
    through each, so the fallback backup is older by as much."""
    merged = []
    for a, b in sorted(stalls):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    extra = 0
    while True:
        lo = before - reach - extra
        found = sum(max(0, min(b, before) - max(a, lo)) for a, b in merged)
        if found <= extra:
            return extra
        extra = found


def steps_uploading(uploads, at, before=-1):
    """The steps the job could train, at full speed, from the start of the
    backup still uploading at time `at` (the one that would have been the
    fallback had it landed) to `at`; 0 if none was. Given `before`, the
    step trained at `at`, no fewer than that backup's step lies behind it
    beyond a save interval: the base bound allows the watermark, which
    starts a backup, one save interval's lag, and on a loaded host it lags
    more (rs(6,2) seed 116: the backup of 1,600 began with training at
    1,633). That term leaves no slack: it is the loss when the fallback is
    the backup one BACKUP_EVERY before the one in flight."""
    in_flight = [(at - b, step) for b, e, step in uploads if b <= at and (e is None or e > at)]
    if not in_flight:
        return 0
    seconds, step = max(in_flight)
    steps = int(seconds * 1000 / STEP_MS + 0.5)
    if before >= 0 and step is not None:
        steps = max(steps, before - step - INTERVAL)
    return steps


def summarize(job, applier):
    """Work lost and recovery time per fault that restarted the job.

    Work lost is the newest step trained before the fault minus the step the
    job resumed from: the first start of each node after the fault, skipping
    a start that ended at once on the poison (the job resumed from the step
    after the quarantine); a start of a step poisoned only later counts. Its bound is what the tiers held:
    the save interval plus the save in flight, behind the slowest rank
    (rank_spread) unless the job was restarting; the backup interval instead
    when more than one node was without its RAM (away, or back empty,
    replaced or wiped by maintenance --lose-ram within chaos.RAM_REFILL_S: a node
    and its peer may both have lost their copies) or a crash loop
    quarantined the newest step; plus the steps trained while a RAM disk
    was full (no save could land there) or a link was slow (the toy
    trainers do not slow down with it, replication does), each until two
    save intervals after it healed, and, when the backup was needed, the
    steps trained since the backup then uploading began (the fallback is
    the backup before it), and while S3 failed (until two backup intervals
    after) and one backup interval more (the backup under way when S3
    failed is lost with it). When the backup is needed, a full disk or a
    slow link counts wherever it lies within the bound's reach, not only
    in force (the watermark stood still, so no backup was taken), and so
    does the gap each failed backup left (retry_pauses); a crash loop
    that poisoned a backup's step falls back one backup further.
    """
    records = start_records(job)  # one read of each run log
    events = backup_events(job)
    uploads = backup_uploads(events)
    backed_up = committed_steps(events)
    poisoned = poisoned_steps(job)
    out = []
    for r in applier.records:
        entry = {"kind": r["kind"], "nodes": r["nodes"], "at": r["at"]}
        if "skipped" in r:
            entry["skipped"] = r["skipped"]
        elif r["kind"] in RESTARTS:
            if "recovery_s" in r:
                entry["recovery_s"] = r["recovery_s"]
            # A start that ended at once on the poison is skipped; one of a
            # step poisoned only later counts (rs(6,2) seed 153: a partition
            # resumed from 775, which a crash loop poisoned afterwards).
            after = [records[n][len(r["starts"].get(n, [])):] for n in range(job.nodes)]
            firsts = [next((s or 0 for s, bad in a if not bad), None) for a in after]
            firsts = [f for f in firsts if f is not None]
            if firsts and r["before"] >= 0:
                entry["before"], entry["resumed"] = r["before"], min(firsts)
                entry["steps_read"] = r.get("steps_read", [])
                entry["lost_steps"] = max(0, r["before"] - min(firsts))
                # A crash loop quarantines the newest step; the tiers in
                # RAM keep only the newest, so the backup is the fallback.
                needs_backup = r.get("away", 0) > 1 or r["kind"] == "crash_loop"
                bound = (BACKUP_EVERY if needs_backup else INTERVAL) + INTERVAL
                if not needs_backup and not r.get("restarting"):
                    bound += rank_spread(r["before"], r.get("steps_read", []))
                if needs_backup:
                    bound += steps_uploading(uploads, r.get("struck", r["applied"]), r["before"])
                    # A crash loop on a step restored from a backup quarantines
                    # that backup's step: the fallback is the backup before it.
                    if r["kind"] == "crash_loop" and any(
                            r["before"] - bound <= p <= r["before"] for p in poisoned & backed_up):
                        bound += BACKUP_EVERY
                    stalls = r.get("stalls", []) + retry_pauses(events, r["applied"], r["before"])
                    bound += stalled_within(stalls, r["before"], bound)
                else:
                    for since in ("full_since", "slow_since"):
                        if r.get(since, -1) >= 0:
                            bound += max(0, r["before"] - r[since])
                if needs_backup and r.get("s3_since", -1) >= 0:
                    # A backup takes its step some seconds before its last
                    # part lands: the one under way when S3 went bad is lost
                    # with it, so the S3 fault counts from a backup earlier.
                    bound += max(0, r["before"] - r["s3_since"]) + BACKUP_EVERY
                entry["bound"] = bound
        out.append(entry)
    share_restart_bounds(applier.records, out)
    return out


def rank_spread(before, steps_read):
    """How far the slowest rank trained behind `before` (the newest step any
    rank reported) when the fault struck: the toy trainers run side by side,
    not in lockstep as ranks joined by a collective do, and a step every
    rank holds in RAM is at most the slowest rank's newest save (rs(6,2)
    seed 161: ranks 19 to 45 steps apart with two runs on the host, about
    10 with one). 0 when no rank reported a step. summarize adds it to the
    RAM tiers' bound only: the backup's already allows a watermark behind
    (steps_uploading), and a fault read while the job restarts has ranks
    restarted and ranks not, whose spread is not training's."""
    reported = [s for s in steps_read if s >= 0]
    return max(0, before - min(reported)) if reported else 0


def share_restart_bounds(records, out):
    """A fault that came before the job recovered from an earlier one shares
    its restart (a crash loop then poisons the step that restart takes, or a
    partition comes while a crash loop falls back to a backup): both losses
    are bounded by the larger of their bounds. `out[i]` is the entry of
    `records[i]`."""
    for i, r in enumerate(records):
        if "bound" not in out[i]:
            continue
        until = r["applied"] + r.get("recovery_s", float("inf"))
        for j in range(i + 1, len(records)):
            if records[j]["applied"] < until and "bound" in out[j]:
                shared = max(out[i]["bound"], out[j]["bound"])
                out[i]["bound"] = out[j]["bound"] = shared


def lost_beyond_bound(faults):
    """The violations of faults that lost more steps than their bound."""
    return ["%s at t=%.1f s lost %d steps (bound %d)" %
            (f["kind"], f["at"], f["lost_steps"], f["bound"])
            for f in faults if "lost_steps" in f and f["lost_steps"] > f["bound"]]


def start_records(job):
    """Per node, each trainer start as (restored step or None for a fresh
    start, whether that run ended at once on the poison), from its run log."""
    out = {}
    for n in range(job.nodes):
        text = read_log(job.log("run", n)).decode(errors="replace")
        out[n] = []
        for m in re.finditer(r"restored step=(\d+)|fresh start|( is poisoned )", text):
            if not m.group(2):
                out[n].append([int(m.group(1)) if m.group(1) else None, False])
            elif out[n]:
                out[n][-1][1] = True
    return out


def poisoned_steps(job):
    """The steps poisoned so far: listed in the poison file, or claimed."""
    out = set()
    for path in (job.poison, job.poison + ".step"):
        try:
            with open(path) as f:
                out |= {int(w) for w in f.read().split() if w.isdigit()}
        except OSError:
            pass
    return out
