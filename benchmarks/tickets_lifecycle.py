#!/usr/bin/env python3
"""Tickets' lifecycle on real measurements: a range opens when a kernel gets slower, is not filed
again by the next run, is not closed by a run that measured only part of it, closes when the
kernel is fast again, and reopens when it regresses.

A demonstration, not a test (real `perfbench run`s, minutes). Like power_ab.py it copies this
working tree into a scratch git repository and slows head's Softmax driver by busy-waiting
SLOWDOWN of the time its pass took (so Softmax loses to ORT by about that factor), then runs
`perfbench run --suite attention --filter FILTER` on a scratch database in this order:

  1. the normal build          2. slowed      3. slowed again   4. normal, one cell only (filtered)
  5. normal, the whole filter  6. slowed

and prints what each run did to the tickets, then `perfbench tickets --all` and the ticket.

    .venv/bin/python benchmarks/tickets_lifecycle.py [--filter "op=Softmax threads=1 dtype=f32"] [--slowdown 200]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from power_ab import ROOT, scratch_repo, set_level  # noqa: E402

PB = [sys.executable, "-m", "perfbench.cli.main"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filter", default="op=Softmax threads=1 dtype=f32 cache=warm",
                    help="the cells every run measures")
    ap.add_argument("--slowdown", type=float, default=200.0, help="percent added to the Softmax driver's time")
    ap.add_argument("-o", "--output", help="write each run's ticket summary as JSON here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="perfbench-tickets-"))
    repo = scratch_repo(work)
    env = {**os.environ, "PYTHONPATH": str(repo), "PERFBENCH_BUILD_DIR": str(ROOT / "build" / "native"),
           "PERFBENCH_DB": f"sqlite:///{work / 'tickets.db'}"}
    steps = [("normal", 0, args.filter), ("slowed", args.slowdown, args.filter),
             ("slowed again", args.slowdown, args.filter),
             ("normal, one cell of the range only", 0, None),  # filter: the ticket's first cell
             ("normal", 0, args.filter), ("slowed", args.slowdown, args.filter)]
    log = []
    t0 = time.monotonic()
    for i, (what, level, flt) in enumerate(steps, 1):
        set_level(repo, int(round(level * 10)), "spin")
        if flt is None:
            r = subprocess.run(PB + ["tickets", "--format", "json"], cwd=repo, env=env, capture_output=True, text=True)
            loss = [t for t in json.loads(r.stdout)["tickets"] if t["kind"] == "loss"]
            if not loss:
                print("no loss ticket to measure part of", file=sys.stderr)
                return 1
            axes = loss[0]["cells"][0]["axes"]
            flt = args.filter + " " + " ".join(f"{k}={v}" for k, v in axes.items())
        r = subprocess.run(PB + ["run", "--suite", "attention", "--filter", flt, "--format", "json"], cwd=repo, env=env,
                           capture_output=True, text=True)
        line = next((ln for ln in r.stderr.splitlines() if ln.startswith("tickets:")), "(no tickets line)")
        doc = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {"cells": []}
        slow = [c for c in doc["cells"] if c["verdict"] == "loss"]
        print(f"run {i} ({what}; filter {flt!r}): exit {r.returncode}, {len(doc['cells'])} cells, "
              f"{len(slow)} loss; {line}  [{time.monotonic() - t0:.0f} s]", flush=True)
        if r.returncode not in (0, 1):
            print(r.stderr[-3000:], file=sys.stderr)
            return 1
        log.append({"step": i, "what": what, "filter": flt, "tickets": line, "cells": len(doc["cells"]),
                    "loss": len(slow)})
    for cmd in (["tickets", "--all"], ["tickets", "--all", "--format", "json"]):
        r = subprocess.run(PB + cmd, cwd=repo, env=env, capture_output=True, text=True)
        if cmd[-1] == "json":
            tickets = json.loads(r.stdout)["tickets"]
            for t in tickets:
                shown = subprocess.run(PB + ["tickets", "show", str(t["id"])], cwd=repo, env=env,
                                       capture_output=True, text=True)
                print(shown.stdout)
        else:
            print(r.stdout)
    if args.output:
        Path(args.output).write_text(json.dumps({"runs": log, "tickets": tickets}, indent=1))
    print(f"scratch repository and database: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
