#!/usr/bin/env python3
"""How long `perfbench dashboard` takes on a database of N measurements (default 10,000).

Writes a scratch SQLite database of synthetic runs (attention-like Softmax and GQA cells, both
sides measured: 2 measurements per cell, 8 replicates each), then times the real command end to
end (process start, reading the database, writing the site). A benchmark, not a test.

    .venv/bin/python benchmarks/dashboard_gen.py [--measurements 10000] [--runs 10]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfbench.compare import verdicts  # noqa: E402
from perfbench.store import models as m  # noqa: E402
from perfbench.store import repo  # noqa: E402
from perfbench.store.db import Store  # noqa: E402
from perfbench.store.hostinfo import HostFacts  # noqa: E402


def cases():
    for dtype in ("f32", "f16", "bf16"):
        for threads in (1, 2):
            for heads in (8, 14, 32, 64):
                for keys in (128, 256, 512, 1024, 2048, 4096, 8192):
                    for queries in (1, 16, 128):
                        yield "Softmax", {"batch": 1, "heads": heads, "queries": queries, "keys": keys}, dtype, threads
            for past in (128, 256, 512, 1024, 2048, 4096):
                for kv in ("copy", "shared"):
                    yield ("GroupQueryAttention", {"batch": 1, "seq": 1, "heads": 32, "kv_heads": 8, "head_size": 128,
                                                   "past": past, "kv": kv, "rotary": 0, "interleaved": 0, "ragged": 0},
                           dtype, threads)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--measurements", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="perfbench-dash-"))
    url = f"sqlite:///{work / 'big.db'}"
    per_run = args.measurements // 2 // args.runs
    all_cases = list(cases())[:per_run]
    rnd = random.Random(1)
    store = Store(url)
    t0 = datetime(2026, 11, 1)
    with store.session() as s:
        host = repo.ensure_host(s, HostFacts(hostname="bench", cpu_model="Bench CPU", cores=2, os_family="Linux",
                                             cpu_flags=[], l2_bytes=1 << 19, l3_bytes=32 << 20,
                                             memory_bytes=1 << 34, meta={}))
        build = repo.ensure_build(s, SimpleNamespace(build_id="b", source_hash="s", compiler="gcc",
                                                     compiler_version="gcc 12", flags=[], isa_compiled=["avx2"],
                                                     isa_flags={}))
        n = 0
        for i in range(args.runs):
            r = m.Run(suite="big", suite_hash="h", status="complete", partial=False, filters=[], settings={},
                      host_id=host.id, host_class_id=host.host_class_id, build_id=build.id, ort_version="1.31.1",
                      protocol_version=1, schema_version=1, versions={}, git_sha=f"{i:040x}", branch="main",
                      hostname="bench", started_at=t0 + timedelta(days=i), finished_at=t0 + timedelta(days=i, hours=1))
            s.add(r)
            s.flush()
            for op, params, dtype, threads in all_cases:
                cid = op + "".join(f".{k}={v}" for k, v in params.items())
                case = repo.ensure_case(s, cid, op, params, "t")
                ort = [1000.0 * (1 + 0.01 * rnd.random()) for _ in range(8)]
                base = math.exp(rnd.gauss(-0.3, 0.4))
                ours = [o * base * (1 + 0.02 * rnd.random()) for o in ort]
                v = verdicts.decide("ok", "ok", ours, ort)
                c = m.Cell(run_id=r.id, case_pk=case.id, dtype=dtype, threads=threads, device="cpu", cache="warm",
                           spin="off", timing_hash="t", numerics_hash="n", seed=1, n=v.n, ratio=v.ratio, ratio_lo=v.lo,
                           ratio_hi=v.hi, mean_log=v.mean_log, sd_log=v.sd_log, ci_method=v.method, verdict=v.verdict,
                           flops=1e6, bytes_moved=4e5, measured_at=r.started_at)
                c.measurements.append(m.Measurement(impl="ours", status="ok", dtype=dtype, median_ns=sorted(ours)[4],
                                                    replicates_ns=ours, throughput=400.0, throughput_unit="GB/s"))
                c.measurements.append(m.Measurement(impl="ort", status="ok", dtype=dtype, path="kernel",
                                                    median_ns=sorted(ort)[4], replicates_ns=ort))
                s.add(c)
                n += 2
    store.dispose()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "perfbench.cli.main", "dashboard", "--db", url, "-o",
                        str(work / "site")], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    print(r.stderr.strip())
    print(f"{n} measurements ({n // 2} cells, {args.runs} runs): perfbench dashboard took {wall:.2f} s wall "
          f"(exit {r.returncode}); site in {work / 'site'}")
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
