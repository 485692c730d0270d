#!/usr/bin/env python3
"""Shares of peak of stored runs, recounted under other peak sets (issue 17, finding 5).

A run's JSON (`perfbench run --format json`) keeps each side's throughput, the op's traffic and
bound, and the op and parameters (whose outputs give the share of written bytes); a share is
throughput / ceiling, the ceiling picked as the runner picks it (`verdicts.ceiling_for`: the
bandwidth at the side's working set, thread count and write share; the f32 FMA peak for
compute-bound cells). Dividing the same measurements by each peak set's ceilings compares the
sets side by side, with no second run in between. Prints, per run and peak set, how many
measurements (ours or ORT's) exceed 100% and the largest ones.

    .venv/bin/python benchmarks/ceiling_shares.py RUN.json [RUN.json ...] --peaks NAME=DB [--peaks NAME=DB ...] [--medians]

--medians also divides by each set's medians (the ceiling before c5ade71; now each probe's best
sample within 15% of its median, verdicts.best), as a set named "NAME medians".

DB: a results database whose newest `perfbench peaks` set is taken (the first host in it).
"""

from __future__ import annotations

import argparse
import json

from sqlalchemy import select

from perfbench import dtypes
from perfbench.compare import verdicts
from perfbench.ops import base as ops_base
from perfbench.runner import write_share
from perfbench.store import models as m
from perfbench.store import repo
from perfbench.store.db import Store


def peak_set(url: str) -> list[dict]:
    with Store(url).session() as s:
        host = s.scalar(select(m.Host).order_by(m.Host.id).limit(1))
        if host is None:
            raise SystemExit(f"{url}: no host (and so no peaks) stored")
        return repo.latest_peaks(s, host)


def medians(peaks: list[dict]) -> list[dict]:
    """A peak set without its samples: every ceiling is a probe's stored median (verdicts.best
    passes a row without samples through)."""
    return [{**p, "samples": None} for p in peaks]


def shares(doc: dict, peaks: list[dict]) -> list[tuple[float, str]]:
    """(share, label) of every timed side of every cell of a run document under `peaks`."""
    out = []
    for c in doc["cells"]:
        w = c.get("work") or {}
        op = ops_base.get(c["op"])
        case = op.make_case(c["params"])
        for side in ("ours", "ort"):
            s = c.get(side) or {}
            tp, med = s.get("throughput"), s.get("median_ns")
            if not tp or not med:
                continue
            # the side's own bytes and write share (ORT's differ where it ran another dtype), from
            # the op's model as the runner takes them: throughput x time can land a float's width
            # below a ladder point and pick the next-smaller probe
            dt = dtypes.get(s.get("dtype") or c["dtype"])
            nbytes = op.bytes_moved(case, dt) if w.get("bound") != "compute" else None
            pk = verdicts.ceiling_for(peaks, w.get("bound"), c["threads"], nbytes, c["cache"] == "cold",
                                      write_share(op, case, dt))
            if pk:
                label = f"{c['case_id']} {c['dtype']} t={c['threads']} {c['cache']} {side}"
                out.append((tp / pk["value"], label))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run documents (perfbench run --format json)")
    ap.add_argument("--peaks", action="append", required=True, metavar="NAME=DB",
                    help="a peak set to divide by: a name and the database holding it")
    ap.add_argument("--medians", action="store_true", help="also divide by each set's medians (the old ceiling)")
    ap.add_argument("--show", type=int, default=5, help="largest shares listed per run and set")
    a = ap.parse_args()
    sets = {}
    for spec in a.peaks:
        name, _, url = spec.partition("=")
        sets[name] = peak_set(url)
        if a.medians:
            sets[name + " medians"] = medians(sets[name])
    out = []
    for path in a.runs:
        with open(path) as f:
            doc = json.load(f)
        for name, pk in sets.items():
            sh = sorted(shares(doc, pk), reverse=True)
            over = [x for x in sh if verdicts.over_ceiling(x[0])]
            out.append({"run": path, "peaks": name, "measurements": len(sh), "over_100": len(over),
                        "largest": [{"share": round(x, 3), "side": lbl} for x, lbl in sh[:a.show]]})
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
