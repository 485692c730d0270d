"""`perfbench repro RUN --filter F -o DIR`: one measured cell as a single-node ONNX model plus a
test-data folder in the standard ONNX layout, so a failing or losing cell can be handed to someone
and replayed (with `perfbench node`, or any ONNX runtime).

DIR/model.onnx                     the cell's node, in the cell's dtype, with the cell's attributes
DIR/test_data_set_0/input_K.pb     the exact input bytes the run measured (same seed, same generator)
DIR/test_data_set_0/output_K.pb    expected outputs: the float64 oracle (CONTRACTS §8) in the cell's dtype
DIR/cell.json                      the cell key, run, verdict, ratio, tolerances and how it was made
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from perfbench import dtypes, ops
from perfbench import filters as filt
from perfbench.errors import UsageError
from perfbench.ops import ort as ort_ops
from perfbench.ops.base import to_f64
from perfbench.store import models as m
from perfbench.store import repo


def find_cell(s, run_id: int, flts: list) -> m.Cell:
    """The one cell of the run that the filters select (CONTRACTS §5), or a clear error."""
    run = repo.load_run(s, run_id)
    hits = [c for c in sorted(run.cells, key=lambda c: c.id) if filt.matches(flts, c)]
    where = " ".join(f'--filter "{f}"' for f in flts) or "(no filter)"
    if not hits:
        raise UsageError(f"no cell of run {run.id} matches {where}: `perfbench show {run.id}` lists its cells")
    if len(hits) > 1:
        listed = "\n  ".join(f"{c.case.case_id} {c.dtype} threads={c.threads} cache={c.cache} spin={c.spin}"
                             for c in hits[:10])
        more = f"\n  ... and {len(hits) - 10} more" if len(hits) > 10 else ""
        raise UsageError(f"{len(hits)} cells of run {run.id} match {where}; repro needs exactly one. Narrow the "
                         f"filter (e.g. add dtype=, threads=, or the remaining axes). Matches:\n  {listed}{more}")
    return hits[0]


def _tensor(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ascontiguousarray(arr), name)


def write(cell: m.Cell, out: Path) -> dict:
    """Write the repro folder for `cell`; returns what was written."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} exists and is not an empty folder: repro writes a new folder, never over files")
    op = ops.get(cell.case.op)
    case = op.make_case(dict(cell.case.params))
    dt = dtypes.get(cell.dtype)
    inputs = op.make_inputs(case, dt, np.random.default_rng(cell.seed))
    graph = op.graph(case)
    oracle = op.oracle(case, to_f64(inputs))
    model = onnx.load_from_string(ort_ops.build_model(graph, dt, copies=1, plain_names=True))
    onnx.checker.check_model(model)
    data = out / "test_data_set_0"
    data.mkdir(parents=True, exist_ok=True)
    (out / "model.onnx").write_bytes(model.SerializeToString())
    names_in = [n for n, _, _ in graph.inputs if n]
    for i, name in enumerate(names_in):
        (data / f"input_{i}.pb").write_bytes(_tensor(name, inputs[name]).SerializeToString())
    names_out = [n for n, _ in graph.outputs]
    for j, name in enumerate(names_out):
        expected = np.asarray(oracle[name]).astype(dt.numpy)
        (data / f"output_{j}.pb").write_bytes(_tensor(name, expected).SerializeToString())
    ours, ort = cell.side("ours"), cell.side("ort")
    info = {
        "perfbench_repro": 1, "run": cell.run_id, "case_id": cell.case.case_id, "op": cell.case.op,
        "params": cell.case.params, "dtype": cell.dtype, "threads": cell.threads, "device": cell.device,
        "cache": cell.cache, "spin": cell.spin, "seed": cell.seed, "timing_hash": cell.timing_hash,
        "numerics_hash": cell.numerics_hash, "verdict": cell.verdict, "ratio": cell.ratio,
        "ci": [cell.ratio_lo, cell.ratio_hi], "ours": {"status": ours.status, "median_ns": ours.median_ns,
                                                        "message": ours.message} if ours else None,
        "ort": {"status": ort.status, "median_ns": ort.median_ns, "path": ort.path, "dtype": ort.dtype}
        if ort else None,
        "numerics": {"err_ours": cell.err_ours, "err_ort": cell.err_ort, "tol": cell.tol, "floor": cell.floor},
        "node": {"op_type": graph.op_type, "domain": graph.domain or "", "opset": graph.opset,
                 "inputs": names_in, "outputs": names_out},
        "expected_outputs": "the float64 oracle (CONTRACTS §8) rounded to the cell's dtype",
    }
    (out / "cell.json").write_text(json.dumps(info, indent=1, default=str) + "\n")
    return {"model": str(out / "model.onnx"), "inputs": len(names_in), "outputs": len(names_out), "info": info}
