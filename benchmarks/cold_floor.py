"""Cold floors before and after issue 17 (finding 4), side by side in one sitting.

For the cold cells of the attention suite, interleaved over ROUNDS rounds: ours' cold no-op
floor, ORT's old floor (a 1-input Identity graph run cold) and ORT's matched floor (the cell's
inputs and outputs, one element each), as perfbench's harness measures them (median of 31 cold
runs each). The difference old - matched is what the 1-input floor left in ORT's cold time.

    .venv/bin/python benchmarks/cold_floor.py [--rounds 5] [--threads 1,2]
"""

from __future__ import annotations

import argparse
import statistics

from perfbench import dtypes, ops
from perfbench.kernels_ffi import builder, load
from perfbench.timing.protocol import CellSpec, Harness, default_evict_bytes

CELLS = [
    ("GroupQueryAttention", {"heads": 14, "kv_heads": 2, "head_size": 64, "past": 1024, "kv": "shared"}),
    ("GroupQueryAttention", {"heads": 32, "kv_heads": 8, "head_size": 128, "past": 1024, "kv": "shared"}),
    ("MultiHeadAttention", {"heads": 32, "head_size": 96, "past": 1024}),
    ("Softmax", {"heads": 32, "queries": 1, "keys": 4096}),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    a = ap.parse_args()
    lib = load(builder.build())
    evict = default_evict_bytes()
    rows = {}
    for rnd in range(a.rounds):
        for t in [int(x) for x in a.threads.split(",")]:
            for name, params in CELLS:
                op = ops.get(name)
                graph = op.graph(op.make_case(params))
                spec = CellSpec(op=name, params=[[k, v] for k, v in params.items()], dtype="f32", threads=t,
                                cache="cold", evict_bytes=evict, evict_threads=t)
                h = Harness(lib)  # fresh: no floor cached
                key = (name, tuple(params.items()), t)
                r = rows.setdefault(key, {"inputs": sum(1 for n, _, _ in graph.inputs if n),
                                          "outputs": sum(1 for o in graph.outputs if o[0]),
                                          "ours": [], "old": [], "matched": []})
                r["ours"].append(h.ours_cold_floor(spec))
                r["old"].append(h.ort_cold_floor(spec))
                r["matched"].append(h.ort_cold_floor(spec, graph, dtypes.F32))
                h._floors.clear()
        print(f"round {rnd + 1}/{a.rounds} done", flush=True)
    print(f"\n| cell | threads | inputs/outputs | ours no-op floor | ORT 1-input floor (before) | ORT matched floor "
          f"(after) | left in ORT's time before |\n|---|---|---|---|---|---|---|")
    for (name, params, t), r in rows.items():
        med = {k: statistics.median(r[k]) for k in ("ours", "old", "matched")}
        desc = name + " " + " ".join(f"{k}={v}" for k, v in params)
        print(f"| {desc} | {t} | {r['inputs']}/{r['outputs']} | {med['ours'] / 1e3:.2f} µs | {med['old'] / 1e3:.2f} µs | "
              f"{med['matched'] / 1e3:.2f} µs | {(med['matched'] - med['old']) / 1e3:+.2f} µs |")


if __name__ == "__main__":
    main()
