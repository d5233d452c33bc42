#!/usr/bin/env python3
"""`queue-exporter plan` over a week of one queue's traffic (issue 47): how
long the command takes on 7 days of 15 s samples, the size a user's
`--since 7d` reads from Prometheus, against the goal of 10 s, and beside
the grid's own time per cell (benches/waitgrid.rs, the same replay code)
measured in the same sitting.

Run it through `scripts/bench --plan` (or with `--smoke` for a short
end-to-end check), which builds the binaries and passes their paths here.

The week (`week_rows`) is a realistic queue's, drawn from a fixed seed: a
working day's swell (0.5 jobs/s at night to about 3.5 in the afternoon),
quieter weekends, a nightly batch (15 minutes at 8 jobs/s at 02:00), a few
unannounced bursts, 10 % noise per row, and a service time of 1.5 s that
drifts by ±20 % over the day; one 10-minute hole (an empty row, as a
Prometheus gap reads) so the gap path is timed too. `plan` replays it with
`--target-wait 60s` and `--json`; the run is timed by the wall clock and
its CPU by `resource.getrusage` of the child.

Only the standard library is needed.
"""

import argparse
import datetime
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import closedloop as cl  # noqa: E402  (the report's splice)
import grid as gr  # noqa: E402  (a grid cell, timed beside plan)
from bench import PLAN_END as END_MARK, PLAN_START as START_MARK, log  # noqa: E402

# The goal: 7 days of 15 s samples within 10 s on this machine.
GOAL_SECONDS = 10.0
STEP = 15
DAYS = 7
TARGET_WAIT = "60s"
SEED = 47
# The grid cell timed beside plan: S 2 s, targetWait 25×S, peak 20, ramp
# (the cell the measured loop also runs), one of the grid's middling ones.
GRID_CELL = (2.0, 25, 20, "ramp")


def rate_at(t, rng_row, bursts):
    """Jobs per second at `t` seconds into the week (Monday 00:00 UTC)."""
    day, second = divmod(t, 86400)
    hour = second / 3600
    weekend = day >= 5
    # The working day's swell, peaking mid-afternoon.
    swell = 0.5 + 3.0 * max(0.0, math.sin(math.pi * (hour - 7) / 12)) ** 1.5
    if weekend:
        swell = 0.5 + 0.4 * (swell - 0.5)
    # The nightly batch.
    if 2 * 3600 <= second < 2 * 3600 + 900:
        swell += 8.0
    for start, length, height in bursts:
        if start <= t < start + length:
            swell += height
    return max(0.0, swell * (1 + 0.1 * rng_row.gauss(0, 1)))


def week_rows(days=DAYS, seed=SEED):
    """The week's rows: (unix time, arrivals per second or None, service
    seconds or None); one 10-minute hole on the third day."""
    rng = random.Random(seed)
    bursts = [(rng.uniform(0, days * 86400), rng.uniform(120, 600), rng.uniform(4, 12))
              for _ in range(2 * days)]
    start = int(datetime.datetime(2026, 11, 23, tzinfo=datetime.timezone.utc).timestamp())
    hole = (int(2.5 * 86400) // STEP * STEP, int(2.5 * 86400) // STEP * STEP + 600) if days >= 3 else None
    rows = []
    for i in range(days * 86400 // STEP):
        t = i * STEP
        if hole and hole[0] <= t < hole[1]:
            rows.append((start + t, None, None))
            continue
        hour = (t % 86400) / 3600
        service = 1.5 * (1 + 0.2 * math.sin(2 * math.pi * hour / 24)) * (1 + 0.03 * rng.gauss(0, 1))
        rows.append((start + t, rate_at(t, rng, bursts), service))
    return rows


def write_trace(path, rows):
    with open(path, "w") as f:
        f.write("time,arrivals_per_second,service_seconds\n")
        for t, rate, service in rows:
            f.write(f"{t},{'' if rate is None else f'{rate:.4f}'},{'' if service is None else f'{service:.4f}'}\n")


def run_plan(binary, trace):
    """One `plan` run: (wall seconds, child CPU seconds, its JSON)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    out = subprocess.run([binary, "plan", "--trace", trace, "--target-wait", TARGET_WAIT, "--json"],
                         check=True, capture_output=True, text=True)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(out.stdout)


def time_grid_cell(sim):
    """The grid's cell GRID_CELL, run by the grid's own driver: (seconds,
    replays in it, model seconds per replay)."""
    s, m, p, sh = GRID_CELL
    n = gr.CELLS.index(GRID_CELL)
    _, length = cl.trace(1.0, seed=gr.SEED + n, phases=gr.phases(sh, gr.phase_length(s, m * s)), base=p / s)
    t = time.monotonic()
    _, results, _ = gr.cell_runs(gr.Sim(sim), s, m, p, sh, gr.SEED + n, None)
    seconds = time.monotonic() - t
    return seconds, len(results), length


def measure(args):
    rows = week_rows()
    if args.smoke:
        rows = rows[: 2 * 3600 // STEP]
    tmp = tempfile.mkdtemp(prefix="qe-bench-plan.")
    trace = os.path.join(tmp, "week.csv")
    write_trace(trace, rows)
    runs = []
    for i in range(1 if args.smoke else args.runs):
        wall, cpu, plan = run_plan(args.bin, trace)
        runs.append({"wall": wall, "cpu": cpu})
        log(f"plan: {len(rows)} rows, {len(plan['candidates'])} candidates, {plan['jobs']} jobs: "
            f"{wall:.2f} s ({cpu:.2f} s CPU), run {i + 1}")
    grid_s, grid_replays, grid_length = time_grid_cell(args.sim)
    log(f"grid cell {GRID_CELL}: {grid_s:.2f} s for {grid_replays} replays of {grid_length:.0f} s each")
    os.remove(trace)
    os.rmdir(tmp)
    return {
        "rows": len(rows),
        "days": len(rows) * STEP / 86400,
        "jobs": plan["jobs"],
        "candidates": len(plan["candidates"]),
        "recommended": plan.get("recommended"),
        "left_out_s": plan["left_out_seconds"],
        "gaps": len(plan["gaps"]),
        "runs": runs,
        "grid": {"cell": list(GRID_CELL), "seconds": grid_s, "replays": grid_replays,
                 "length": grid_length},
    }


def report(r, meta):
    walls = sorted(x["wall"] for x in r["runs"])
    cpus = sorted(x["cpu"] for x in r["runs"])
    median = walls[len(walls) // 2]
    replayed = r["days"] * 86400 * r["candidates"]
    grid = r["grid"]
    grid_rate = grid["replays"] * grid["length"] / grid["seconds"]
    plan_rate = replayed / median
    met = "met" if median <= GOAL_SECONDS else "missed"
    text = [
        START_MARK,
        "### `queue-exporter plan` over a week of one queue (issue 47)",
        "",
        f"Written by `{meta['command']}` on {meta['started']} UTC, commit {meta['rev']}, "
        f"{meta['cores']} cores; {len(walls)} run(s).",
        "",
        f"**How.** A week of one queue's traffic as a `--trace` CSV of {r['rows']:,} rows "
        f"({r['days']:g} days at {STEP} s, the size `--since 7d` reads from Prometheus at its default step): "
        f"a working day's swell from 0.5 to about 3.5 jobs/s, quieter weekends, a nightly batch of 15 minutes "
        f"at 8 jobs/s, unannounced bursts, 10 % noise per row, a service time of 1.5 s drifting ±20 % over "
        f"the day, and one 10-minute hole (scripts/bench.d/plan.py, seed {SEED}). "
        f"`queue-exporter plan --trace week.csv --target-wait {TARGET_WAIT} --json`, the release build, timed "
        f"by the wall clock; the grid's cell S {grid['cell'][0]:g} s, targetWait {grid['cell'][1]}×S, peak "
        f"{grid['cell'][2]}, {grid['cell'][3]} run by its own driver (grid.py) with benches/waitgrid.rs in "
        f"the same sitting, for the replay speed of the same code.",
        "",
        "| figure | this run |",
        "|---|---|",
        f"| jobs replayed per candidate | {r['jobs']:,} |",
        f"| candidates (own, WaitTime, QueueLength sweep) | {r['candidates']} |",
        f"| recommendation | {r['recommended'] or '(none on time)'} |",
        f"| gaps named, and left out of the scores (with the reaction after each) | {r['gaps']}, "
        f"{r['left_out_s']:.0f} s |",
        f"| **wall time, median** (goal ≤ {GOAL_SECONDS:g} s: {met}) | **{median:.2f} s** "
        f"(runs {', '.join(f'{w:.2f}' for w in walls)}) |",
        f"| CPU time, median (both cores) | {cpus[len(cpus) // 2]:.2f} s |",
        f"| replayed seconds per wall second, plan | {plan_rate:,.0f} |",
        f"| replayed seconds per wall second, the grid's cell ({grid['replays']} replays of "
        f"{grid['length']:.0f} s in {grid['seconds']:.2f} s) | {grid_rate:,.0f} |",
        "",
    ]
    if meta.get("smoke"):
        text += ["- (smoke: two hours of the week, the debug build; the goal is not judged)", ""]
    text.append(END_MARK)
    return "\n".join(text) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="the queue-exporter binary")
    ap.add_argument("--sim", required=True, help="benches/waitgrid.rs's binary")
    ap.add_argument("--out", required=True, help="the report to put the section into")
    ap.add_argument("--json", required=True)
    ap.add_argument("--command", default="scripts/bench --plan")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    started = datetime.datetime.now(datetime.timezone.utc)
    r = measure(args)
    meta = {"command": args.command, "started": started.strftime("%Y-%m-%d %H:%M"),
            "rev": cl.bench_rev(), "cores": os.cpu_count(), "smoke": args.smoke}
    with open(args.json, "w") as f:
        json.dump({"results": r, "meta": meta}, f, indent=1)
    cl.splice(args.out, report(r, meta), START_MARK, END_MARK)
    walls = sorted(x["wall"] for x in r["runs"])
    log(f"plan: median {walls[len(walls) // 2]:.2f} s; wrote {args.out}")


if __name__ == "__main__":
    main()
