#!/usr/bin/env python3
"""Power of `perfbench ab`: is a known slowdown caught, and are unchanged cells left alone?

A benchmark of the regression detector, not a test (it takes minutes and its answer is a
measurement). It copies this working tree into a scratch git repository (base = its commit),
then for each slowdown level writes a head whose Softmax driver is slowed, and runs
`perfbench ab --base-rev HEAD` TRIALS times on the Softmax cells given (one per size class) plus
cells of other ops that head does not touch. It prints, per level and cell, how many trials
flagged the cell (⚠️ or 🔴), as a table and JSON.

Two ways to slow the driver (--kind):
  spin  after its pass, the driver busy-waits for `level` of the time the pass just took: a
        slowdown of exactly `level` whatever the cache and the neighbours did (the default; the
        cost is a parameter, so a miss is the detector's, not the slowdown's).
  rows  the driver recomputes `level` of its rows once more, spread evenly over the tensor: real
        extra work, but what it costs varies with what the shared L3 holds (on this host a
        nominal 10% cost the 16 MiB cell between 4% and 19% from trial to trial).

    .venv/bin/python benchmarks/power_ab.py --levels 5,10,20 --trials 20 [--kind spin|rows] [--calibration cal.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLOW_CELLS = {  # class -> filter of one Softmax cell (1 thread, warm, f32)
    "tiny": "op=Softmax heads=14 queries=1 keys=128",
    "medium": "op=Softmax heads=32 queries=1 keys=4096",
    "large": "op=Softmax heads=32 queries=128 keys=512",
}
UNCHANGED_CELLS = {
    "rotary (untouched)": "op=RotaryEmbedding batch=1 seq=1 heads=32 head_size=128 layout=bsnh interleaved=0",
    "gqa decode (untouched)": "op=GroupQueryAttention batch=1 seq=1 heads=32 kv_heads=8 head_size=128 past=1024 kv=copy",
}
COMMON = ["threads=1", "cache=warm", "dtype=f32", "spin=off"]
PATCH_FROM = "    return pb_parallel_for(threads, a->rows, softmax_range, &c);\n}\n"
PATCH_TO = {
    "rows": """    int st_ = pb_parallel_for(threads, a->rows, softmax_range, &c);
    /* benchmarks/power_ab.py: recompute PERMILLE/1000 of the rows once more, spread evenly over the
     * tensor (so the extra rows come from where the main pass found them: cost ~ proportional) */
    static int64_t slow_acc_ = 0;
    for (int64_t i_ = 0; st_ == 0 && i_ < a->rows; i_++) {
        slow_acc_ += PERMILLE;
        if (slow_acc_ >= 1000) {
            slow_acc_ -= 1000;
            softmax_range(&c, i_, i_ + 1);
        }
    }
    return st_;
}
""",
    "spin": """    struct timespec t0_, t_;
    clock_gettime(CLOCK_MONOTONIC, &t0_);
    int st_ = pb_parallel_for(threads, a->rows, softmax_range, &c);
    /* benchmarks/power_ab.py: busy-wait PERMILLE/1000 of the time the pass took */
    clock_gettime(CLOCK_MONOTONIC, &t_);
    int64_t start_ = (int64_t)t0_.tv_sec * 1000000000 + t0_.tv_nsec;
    int64_t end_ = (int64_t)t_.tv_sec * 1000000000 + t_.tv_nsec;
    int64_t until_ = end_ + (end_ - start_) * PERMILLE / 1000;
    while (end_ < until_) {
        clock_gettime(CLOCK_MONOTONIC, &t_);
        end_ = (int64_t)t_.tv_sec * 1000000000 + t_.tv_nsec;
    }
    return st_;
}
""",
}
INCLUDE_FROM, INCLUDE_TO = "#include <stdint.h>\n", "#include <stdint.h>\n#include <time.h>\n"


def git(repo, *args):
    env = {**os.environ, "GIT_AUTHOR_NAME": "power", "GIT_AUTHOR_EMAIL": "p@p", "GIT_COMMITTER_NAME": "power",
           "GIT_COMMITTER_EMAIL": "p@p"}
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env=env)


def scratch_repo(dest: Path) -> Path:
    repo = dest / "repo"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, repo / f)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    return repo


def set_level(repo: Path, permille: int, kind: str) -> None:
    drivers = repo / "native" / "cpu" / "kernels" / "softmax.c"
    git(repo, "checkout", "--", "native/cpu/kernels/softmax.c")
    if permille:
        text = drivers.read_text()
        if PATCH_FROM not in text or INCLUDE_FROM not in text:
            sys.exit("the Softmax driver changed: update PATCH_FROM/INCLUDE_FROM in benchmarks/power_ab.py")
        text = text.replace(INCLUDE_FROM, INCLUDE_TO, 1)
        drivers.write_text(text.replace(PATCH_FROM, PATCH_TO[kind].replace("PERMILLE", str(permille))))


def trial(repo: Path, env: dict, filters: list[str], calibration: str | None) -> dict:
    cmd = [sys.executable, "-m", "perfbench.cli.main", "ab", "--base-rev", "HEAD", "--suite", "attention",
           "--format", "json"]
    for f in filters:
        cmd += ["--filter", f]
    if calibration:
        cmd += ["--calibration", calibration]
    r = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        sys.exit(f"ab failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(r.stdout)


def _matches(flt: str, row: dict) -> bool:
    terms = dict(t.split("=", 1) for t in flt.split())
    return terms.pop("op") == row["op"] and all(str(row["params"].get(k)) == v for k, v in terms.items())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="2,5,10,20", help="slowdowns in percent (comma list)")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--kind", choices=sorted(PATCH_TO), default="spin", help="how head is slowed (see above)")
    ap.add_argument("--calibration", help="a calibration file (perfbench calibration export)")
    ap.add_argument("--db", help="database for the trials' runs (default: a scratch file)")
    ap.add_argument("-o", "--output", help="write the tallies as JSON here")
    args = ap.parse_args()
    levels = [float(x) for x in args.levels.split(",")]
    work = Path(tempfile.mkdtemp(prefix="perfbench-power-"))
    repo = scratch_repo(work)
    env = {**os.environ, "PYTHONPATH": str(repo), "PERFBENCH_BUILD_DIR": str(ROOT / "build" / "native"),
           "PERFBENCH_DB": args.db or f"sqlite:///{work / 'power.db'}"}
    cells = {**SLOW_CELLS, **UNCHANGED_CELLS}
    filters = [" ".join([f, *COMMON]) for f in cells.values()]
    calibration = os.path.abspath(args.calibration) if args.calibration else None
    tallies = {}
    t0 = time.monotonic()
    for level in levels:
        set_level(repo, int(round(level * 10)), args.kind)
        counts = {name: {"flagged": 0, "regression": 0, "trials": 0, "changes": [], "verdicts": []}
                  for name in cells}
        for t in range(args.trials):
            doc = trial(repo, env, filters, calibration)
            for row in doc["rows"]:
                if not row["abs"]:
                    continue
                name = next(n for n, f in cells.items() if _matches(f, row))
                c = counts[name]
                c["trials"] += 1
                c["changes"].append(round(row["abs"]["change"], 4))
                c["verdicts"].append(row["verdict"])
                c["flagged"] += row["verdict"] in ("possible", "regression")
                c["regression"] += row["verdict"] == "regression"
            print(f"level {level:g}% trial {t + 1}/{args.trials} ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
        tallies[f"{level:g}%"] = counts
    print(f"{'slowdown':>8}  {'cell':24} {'flagged':>8} {'🔴':>4} {'median change':>14}")
    for level, counts in tallies.items():
        for name, c in counts.items():
            med = sorted(c["changes"])[len(c["changes"]) // 2] if c["changes"] else float("nan")
            print(f"{level:>8}  {name:24} {c['flagged']:>3}/{c['trials']:<4} {c['regression']:>4} {100 * med:13.1f}%")
    if args.output:
        Path(args.output).write_text(json.dumps({"kind": args.kind, "levels": tallies, "cells": cells, "common": COMMON}, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
