"""How long ORT's intra-op workers keep spinning after a session's last Run (issue 17, finding 3).

After a burst of runs, the process's CPU time is sampled in 0.5 ms windows for 100 ms while the
main thread sleeps; the tail is the end of the last window in which the process used more than
half a window of CPU (a spinning worker). Spin on and off, interleaved, REPEATS bursts each.

    .venv/bin/python benchmarks/spin_tail.py [--threads 2] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from perfbench import dtypes, ops
from perfbench.ops import ort as ortlib


def tail_s(bound, window=0.0005, horizon=0.1) -> float:
    for _ in range(100):
        bound.run()
    t0 = time.perf_counter()
    last = 0.0
    while time.perf_counter() - t0 < horizon:
        c0 = time.process_time()
        time.sleep(window)
        if time.process_time() - c0 > 0.5 * window:
            last = time.perf_counter() - t0
    return last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    op = ops.get("Softmax")
    case = op.make_case({"heads": 32, "queries": 1, "keys": 4096})
    graph = op.graph(case)
    inputs = op.make_inputs(case, dtypes.F32, np.random.default_rng(0))
    bound = {}
    for spin in ("on", "off"):
        sess = ortlib.make_session(ortlib.build_model(graph, dtypes.F32), a.threads, spin)
        bound[spin] = ortlib.Bound(sess, graph, 1, inputs, op.new_outputs(case, np.float32, inputs))
    tails = {"on": [], "off": []}
    for _ in range(a.repeats):
        for spin in ("on", "off"):
            tails[spin].append(tail_s(bound[spin]))
    for spin, ts in tails.items():
        print(f"spin {spin}, {a.threads} threads: busy for {statistics.median(ts) * 1e3:.1f} ms after the last Run "
              f"(median of {len(ts)}; {', '.join(f'{t * 1e3:.1f}' for t in ts)} ms)")


if __name__ == "__main__":
    main()
