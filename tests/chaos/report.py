"""The figures of chaos runs (chaos.py): per fault kind and in total,
printed after a run or as docs/reliability.md's markdown from --json."""
import statistics


def figures(reports):
    """Per fault kind (sorted): (kind, injected, skipped, steps lost, bounds,
    recovery seconds); and the totals: faults, overlapping, S3 requests
    failed and held, quarantines."""
    by_kind = {}
    for r in reports:
        for f in r["faults"]:
            by_kind.setdefault(f["kind"], []).append(f)
    rows = []
    for kind in sorted(by_kind):
        fs = by_kind[kind]
        rows.append((kind, len(fs), sum("skipped" in f for f in fs),
                     [f["lost_steps"] for f in fs if "lost_steps" in f],
                     sorted({f["bound"] for f in fs if "bound" in f}),
                     [f["recovery_s"] for f in fs if "recovery_s" in f]))
    s3 = {}
    for r in reports:
        for k, v in r.get("s3_injected", {}).items():
            s3[k] = s3.get(k, 0) + v
    totals = {"faults": sum(len(r["faults"]) for r in reports),
              "overlapping": sum(r.get("overlapping", 0) for r in reports),
              "s3_failed": s3.get("errors", 0), "s3_held": s3.get("held", 0),
              "quarantines": sum(r.get("quarantined", 0) for r in reports)}
    return rows, totals


def _median_max(values, fmt, sep, none):
    if not values:
        return none
    return fmt % statistics.median(values) + sep + fmt % max(values)


def _span(bounds, dash, none):
    if not bounds:
        return none
    return "%d" % bounds[0] if len(bounds) == 1 else "%d%s%d" % (bounds[0], dash, bounds[-1])


def print_figures(reports):
    rows, t = figures(reports)
    print("\n%-22s %6s %8s %16s %8s %18s" % (
        "fault", "count", "skipped", "lost (med, max)", "bound", "recovery (med, max)"))
    for kind, count, skipped, lost, bounds, rec in rows:
        print("%-22s %6d %8d %16s %8s %18s" % (
            kind, count, skipped, _median_max(lost, "%g", ", ", "-"), _span(bounds, "-", "-"),
            _median_max(rec, "%.1f s", ", ", "-")))
    print("faults %d (%d overlapping); S3 requests failed %d, held %d; quarantines %d" % (
        t["faults"], t["overlapping"], t["s3_failed"], t["s3_held"], t["quarantines"]))
    print("runs %d, seeds with a violation %d" % (len(reports),
                                                 sum(bool(r["violations"]) for r in reports)))


def print_markdown(reports):
    """The figures of docs/reliability.md, from a --json file."""
    rows, t = figures(reports)
    print("| fault | injected | skipped | steps lost (median / max) | bound | "
          "recovery (median / max) |")
    print("|---|---|---|---|---|---|")
    for kind, count, skipped, lost, bounds, rec in rows:
        print("| %s | %d | %d | %s | %s | %s |" % (
            kind, count, skipped, _median_max(lost, "%g", " / ", "–"), _span(bounds, "–", "–"),
            _median_max(rec, "%.1f s", " / ", "–")))
    failed = [r for r in reports if r["violations"]]
    print()
    print("runs %d (seeds %d–%d), faults %d, %d of them overlapping an earlier one; "
          "S3 requests failed by the proxy %d, held %d; quarantines (per supervisor) %d; "
          "runs with a violation %d%s" % (
              len(reports), min(r["seed"] for r in reports), max(r["seed"] for r in reports),
              t["faults"], t["overlapping"], t["s3_failed"], t["s3_held"], t["quarantines"],
              len(failed), "" if not failed else " (" + ", ".join(
                  "seed %d: %s" % (r["seed"], r["violations"][0]) for r in failed) + ")"))
    totals = [r["seconds_total"] for r in reports if r.get("seconds_total")]
    if totals:
        print("run time per seed: median %.0f s, max %.0f s" % (statistics.median(totals),
                                                               max(totals)))
