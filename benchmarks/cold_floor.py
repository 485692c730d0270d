"""Cold floors before and after issue 17 (finding 4), side by side in one sitting.

For the cold cells of the attention suite, interleaved over ROUNDS rounds: ours' cold no-op
floor, ORT's old floor (a 1-input Identity graph run cold), the matched floor perfbench uses
(the cell's inputs and outputs, one element each, one Identity per output) and, for comparison,
the same inputs and outputs with all outputs from one Split node; each as the harness measures
floors (median of 31 cold runs). matched - old is what the
1-input floor left in ORT's cold time.

    .venv/bin/python benchmarks/cold_floor.py [--rounds 5] [--threads 1,2]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from onnx import helper

from perfbench import dtypes, ops
from perfbench.kernels_ffi import builder, load
from perfbench.ops import ort as ortlib
from perfbench.timing import protocol
from perfbench.timing.protocol import CellSpec, Harness, default_evict_bytes


def split_floor(h: Harness, spec: CellSpec, graph) -> float:
    """The alternative: the same inputs and outputs, all float outputs from one Split node of
    the first float input (then holding one element per output)."""
    floor = ortlib.floor_graph(graph)
    src = next(n for n, t, _ in floor.inputs if t == "float")
    k = len(floor.outputs)
    ins = [(n, t, (k,) if n == src else (1,)) for n, t, _ in floor.inputs]

    def elem(t):
        return dtypes.F32.onnx if t == "float" else ortlib._ELEM[t]

    g_in = [helper.make_tensor_value_info(f"{n}__0", elem(t), list(shape)) for n, t, shape in ins]
    outs = [f"{o[0]}__0" for o in floor.outputs]
    node = (helper.make_node("Split", [f"{src}__0"], outs, axis=0) if k > 1
            else helper.make_node("Identity", [f"{src}__0"], outs))
    g_out = [helper.make_tensor_value_info(o, dtypes.F32.onnx, [1]) for o in outs]
    model = helper.make_model(helper.make_graph([node], "floor", g_in, g_out), opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = ortlib.IR_VERSION
    spec_g = ortlib.GraphSpec("Identity", "", 13, ins, [(o[0], (1,), "float") for o in floor.outputs])
    arr = {n: np.ones(shape[0], dtypes.F32.numpy if t == "float" else protocol.ELEM_TYPES[t]) for n, t, shape in ins}
    bound = ortlib.Bound(ortlib.make_session(model.SerializeToString(), spec.threads, spec.spin), spec_g, 1, arr,
                         {o[0]: np.ones(1, np.float32) for o in floor.outputs})
    bound.run()
    ev = h.evict_buffer(spec)
    ts = []
    for _ in range(31):
        h.lib.evict(ev)
        ts.append(protocol._time_once(bound))
    return float(np.median(ts))


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
                                          "ours": [], "old": [], "matched": [], "split": []})
                r["ours"].append(h.ours_cold_floor(spec))
                r["old"].append(h.ort_cold_floor(spec))
                r["matched"].append(h.ort_cold_floor(spec, graph, dtypes.F32))
                r["split"].append(split_floor(h, spec, graph))
                h._floors.clear()
        print(f"round {rnd + 1}/{a.rounds} done", flush=True)
    print("\n| cell | threads | inputs/outputs | ours no-op floor | ORT 1-input floor (before) | ORT matched floor "
          "(after) | matched − before | one Split for all outputs |\n|---|---|---|---|---|---|---|---|")
    for (name, params, t), r in rows.items():
        med = {k: statistics.median(r[k]) for k in ("ours", "old", "matched", "split")}
        desc = name + " " + " ".join(f"{k}={v}" for k, v in params)
        print(f"| {desc} | {t} | {r['inputs']}/{r['outputs']} | {med['ours'] / 1e3:.2f} µs | {med['old'] / 1e3:.2f} µs | "
              f"{med['matched'] / 1e3:.2f} µs | {(med['matched'] - med['old']) / 1e3:+.2f} µs | "
              f"{med['split'] / 1e3:.2f} µs |")


if __name__ == "__main__":
    main()
