#!/usr/bin/env python3
"""One grid cell's timeline: WaitTime and the QueueLength thresholds you
name, replayed over the cell's own trace (the grid's seed, timings and
scoring), printed side by side at every HPA sync: replicas, backlog and the
scaler's answer. It shows where a trigger's worker time goes, which the
grid's one ratio per cell cannot (BENCHMARKS.md, "Why do 10x bursts still
cost more?").

    python3 scripts/bench.d/timeline.py --cell 15 --threshold 7.45 --min 1

--sim takes a built benches/waitgrid.rs; without it this builds one
(`cargo build --release --bench waitgrid`). Cells are numbered as in
grid.py: ((s·3 + w)·3 + p)·2 + shape over SERVICES, WAIT_MULTIPLES, PEAKS
and SHAPES.
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import closedloop as cl  # noqa: E402
import grid  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build():
    """The release waitgrid binary's path, built if needed."""
    out = subprocess.run(
        ["cargo", "build", "--release", "--bench", "waitgrid", "--message-format=json"],
        cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
    for line in out.splitlines():
        m = json.loads(line)
        if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "waitgrid" and m.get("executable"):
            return m["executable"]
    raise SystemExit("timeline.py: cargo built no waitgrid binary")


def runs(sim, cell, seed, thresholds, floor):
    """WaitTime's and each threshold's run over cell `cell`'s trace."""
    service, mult, peak, shape = grid.CELLS[cell]
    wait = mult * service
    length = grid.phase_length(service, wait)
    arrivals, total = cl.trace(1.0, seed=seed + cell, phases=grid.phases(shape, length), base=peak / service)
    triggers = grid.wait_triggers(service, wait)[:1]
    for v in thresholds:
        triggers.append((f"QueueLength {v:g}" + (", min 1" if floor else ""),
                         {"mode": "QueueLength", "value": f"{v:g}", "queue": cl.LIST, "source": "sim"}, floor))
    reg = grid.regime(dict(service=service, mult=mult, peak=peak, shape=shape), arrivals, total, service,
                      wait, 1.0, grid.POLL, triggers, grid.MAX_REPLICAS, timeline=True)
    reg["score_from"] = length / 2
    s = grid.Sim(sim)
    try:
        return grid.CELLS[cell], length, s.run(reg)
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cell", type=int, required=True, help=f"0 to {len(grid.CELLS) - 1}")
    ap.add_argument("--threshold", type=float, action="append", default=[], help="a QueueLength value (repeat)")
    ap.add_argument("--min", type=int, choices=(0, 1), default=0, help="the thresholds' minReplicaCount")
    ap.add_argument("--seed", type=int, default=grid.SEED, help="the grid's base seed (cell n runs seed + n)")
    ap.add_argument("--every", type=float, default=15.0, help="print a row every this many seconds")
    ap.add_argument("--sim", help="a built benches/waitgrid.rs (else built here)")
    args = ap.parse_args()
    if not 0 <= args.cell < len(grid.CELLS):
        ap.error(f"--cell must be 0 to {len(grid.CELLS) - 1}")
    (service, mult, peak, shape), length, results = runs(
        args.sim or build(), args.cell, args.seed, args.threshold, args.min)
    print(f"cell {args.cell}: S {service:g} s, targetWait {mult}×S, peak {peak}, {shape}; "
          f"seed {args.seed + args.cell}; scored from {length / 2:.0f} s")
    for r in results:
        print(f"  {r['name']}: {r['within_pct']:.2f} % within targetWait, "
              f"{r['worker_s'] / 60:,.0f} worker-minutes, p99 wait {r['p99_wait']:.1f} s")
    print("\n     t  " + "  |  ".join(f"{r['name'][:24]:<24}" for r in results))
    print("        " + "  |  ".join(f"{'replicas':>8} {'backlog':>7} {'answer':>7}" for _ in results))
    step = 0.0
    for rows in zip(*(r["timeline"] for r in results)):
        t = rows[0][0]
        if t + 1e-9 < step:
            continue
        step = t + args.every
        cells = [f"{rep:>8} {backlog:>7} {'error' if v is None else f'{v:.2f}':>7}" for _, rep, backlog, v in rows]
        print(f"{t:>6.0f}  " + "  |  ".join(cells))


if __name__ == "__main__":
    main()
