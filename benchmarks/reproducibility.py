#!/usr/bin/env python3
"""Do verdicts reproduce? Figures for docs/protocol.md from runs already stored (a benchmark of the
protocol, not a test: its answer is a measurement).

  runs      several stored runs of the same cells (e.g. three `perfbench run --suite attention`):
            per pair of runs, the share of one run's point ratios inside the other's 95% interval
            (about 83% when the intervals are right: the difference of two runs has sqrt(2) times
            the standard error), cells `win` in one run and `loss` in another, and the median width
            of the intervals (hi/lo).
  carryover the two runs of an A/A `perfbench ab` (origin ab-base, ab-head): per side, the mean
            of log(block / that side's median block in the replicate), by the side that ran just
            before the block ("start": the first block of a replicate). Positions are balanced by
            every design; predecessors were not before protocol 2. Runs stored before protocol 2
            carry no design: their order is the old rotation's (labels + ort rotated by the round).

  ortorder  one stored run: per warm cell, ORT's block differential in its (1, K) blocks against
            its (K, 1) blocks, as a ratio (geometric mean over the replicates): near 1 when the
            order does not matter; the distribution per thread count and the cells furthest
            from 1. Which blocks were (1, K) follows the run's protocol (--clock overrides):
            5 "pair" (every second round of the cell's clock), 4 "cell" (odd rounds of the
            cell's clock, as of 7a39254; runs of 4 before it: --clock replicate), 3 and
            earlier "replicate" (round 1 of each replicate).

    .venv/bin/python benchmarks/reproducibility.py runs --db results.db 12 13 14
    .venv/bin/python benchmarks/reproducibility.py carryover --db results.db 15 16
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics

from perfbench.compare import views
from perfbench.store import repo
from perfbench.store.db import Store


def _cells(s, run_id: int) -> dict:
    run = repo.load_run(s, run_id)
    out = {}
    for c in run.cells:
        v = views.cell_view(c)
        out[(v["case_id"], v["dtype"], v["threads"], v["cache"], v["spin"])] = v
    return out


def runs_table(s, run_ids: list[int]) -> dict:
    cells = [_cells(s, r) for r in run_ids]
    keys = set.intersection(*(set(c) for c in cells))
    timed = [k for k in keys if all(c[k]["ratio"] and c[k]["ci_low"] and c[k]["ci_high"] for c in cells)]
    pairs = []
    for i, j in itertools.permutations(range(len(run_ids)), 2):
        inside = sum(cells[j][k]["ci_low"] <= cells[i][k]["ratio"] <= cells[j][k]["ci_high"] for k in timed)
        pairs.append({"point_of": run_ids[i], "interval_of": run_ids[j], "inside": inside, "of": len(timed)})
    flips = sorted(k for k in timed if {"win", "loss"} <= {c[k]["verdict"] for c in cells})
    widths = [c[k]["ci_high"] / c[k]["ci_low"] for c in cells for k in timed]
    verdicts = {r: {v: sum(c[k]["verdict"] == v for k in timed) for v in ("win", "loss", "undecided")}
                for r, c in zip(run_ids, cells)}
    total_in = sum(p["inside"] for p in pairs)
    total = sum(p["of"] for p in pairs)
    return {"runs": run_ids, "timed_cells": len(timed), "coverage": total_in / total if total else None,
            "pairs": pairs, "win_loss_flips": [list(k) for k in flips], "verdicts": verdicts,
            "median_ci_width": statistics.median(widths) if widths else None}


def _old_order(labels: list, rounds: int, rep: int) -> list:
    order = list(labels) + ["ort"]
    seq = []
    for rnd in range(rounds):
        g = rep * rounds + rnd
        if len(labels) == 1:
            seq += order
        else:
            k = g % len(order)
            seq += order[k:] + order[:k]
    return seq


def carryover(s, base_run: int, head_run: int) -> dict:
    b, h = _cells(s, base_run), _cells(s, head_run)
    acc: dict = {}
    for k in set(b) & set(h):
        cb, ch = b[k], h[k]
        if not (cb["ours"] and ch["ours"] and cb["ours"].get("blocks_ns") and ch["ours"].get("blocks_ns")):
            continue
        blocks = {"base": cb["ours"]["blocks_ns"], "head": ch["ours"]["blocks_ns"], "ort": ch["ort"]["blocks_ns"]}
        orders = ch["protocol"].get("order") or []
        for rep in range(len(blocks["base"])):
            rounds = len(blocks["base"][rep])
            seq = orders[rep] if rep < len(orders) else _old_order(["base", "head"], rounds, rep)
            seen = {x: 0 for x in blocks}
            for pos, side in enumerate(seq):
                vals = blocks[side][rep] if rep < len(blocks[side]) else []
                i = seen[side]
                seen[side] += 1
                if i >= len(vals) or not all(v > 0 for v in vals):
                    continue
                med = statistics.median(vals)
                prev = seq[pos - 1] if pos else "start"
                acc.setdefault((side, prev), []).append(math.log(vals[i] / med))
    table = {f"{side} after {prev}": {"mean_pct": 100 * math.expm1(statistics.fmean(v)), "blocks": len(v)}
             for (side, prev), v in sorted(acc.items())}
    return {"base_run": base_run, "head_run": head_run, "by_predecessor": table}


CLOCKS = ("pair", "cell", "replicate")


def clock_of(protocol_version: int) -> str:
    """The K/1 order clock a run's protocol used (Harness._k_first)."""
    return "pair" if protocol_version >= 5 else "cell" if protocol_version == 4 else "replicate"


def one_first(clock: str, rep: int, rnd: int, rounds: int) -> bool:
    """Whether ORT's block in round `rnd` of replicate `rep` ran (1, K). "pair" (protocol 5): the
    cell's round index rep x rounds + rnd, halved, is odd; "cell" (protocol 4 as of 7a39254): that
    index is odd; "replicate" (protocol 3, and 4 before 7a39254): the replicate's round is odd --
    with 3 rounds, round 1 only."""
    g = rep * rounds + rnd
    return {"pair": (g // 2) % 2 == 1, "cell": g % 2 == 1, "replicate": rnd % 2 == 1}[clock]


def _flip_log(b: list, rep: int, clock: str):
    """log(geomean of the replicate's (1, K) blocks / geomean of its (K, 1) blocks), None when the
    replicate holds only one order. Replicates are stored in the cell's order (process shares in
    turn)."""
    R = len(b)
    odd = [one_first(clock, rep, r, R) for r in range(R)]
    ones = [math.log(x) for x, o in zip(b, odd) if o]
    ks = [math.log(x) for x, o in zip(b, odd) if not o]
    if not ones or not ks:
        return None
    return statistics.fmean(ones) - statistics.fmean(ks)


def ort_order(s, run_id: int, show: int = 6, clock: str | None = None) -> dict:
    clock = clock or clock_of(repo.load_run(s, run_id).protocol_version)
    out: dict = {}
    worst = []
    for key, v in _cells(s, run_id).items():
        blocks = (v["ort"] or {}).get("blocks_ns") or []
        if v["cache"] != "warm" or not v["ratio"]:
            continue
        logs = [_flip_log(b, i, clock) for i, b in enumerate(blocks) if len(b) >= 2 and min(b) > 0]
        logs = [x for x in logs if x is not None]
        if not logs:
            continue
        m = statistics.fmean(logs)
        out.setdefault(v["threads"], []).append(m)
        worst.append((abs(m), math.exp(m), list(key), v["protocol"]["K"], v["protocol"]["ort_runs"]))
    table = {}
    for th, xs in sorted(out.items()):
        xs.sort()
        table[f"threads={th}"] = {"cells": len(xs), "median": math.exp(statistics.median(xs)),
                                  "p10": math.exp(xs[len(xs) // 10]), "p90": math.exp(xs[9 * len(xs) // 10]),
                                  "beyond_1.2x": sum(abs(x) > math.log(1.2) for x in xs)}
    worst.sort(reverse=True)
    return {"run": run_id, "clock": clock, "one_first_over_k_first": table,
            "furthest": [{"ratio": r, "cell": k, "K": K, "runs": n} for _, r, k, K, n in worst[:show]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("runs", "carryover", "ortorder"))
    ap.add_argument("run_ids", type=int, nargs="+")
    ap.add_argument("--db", default=None)
    ap.add_argument("--clock", choices=CLOCKS, default=None,
                    help="ortorder: which round index flipped ORT's K/1 order (default: the run's protocol's)")
    a = ap.parse_args()
    store = Store(a.db)
    with store.session() as s:
        if a.what == "runs":
            out = runs_table(s, a.run_ids)
        elif a.what == "ortorder":
            out = ort_order(s, a.run_ids[0], clock=a.clock)
        else:
            out = carryover(s, *a.run_ids[:2])
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
