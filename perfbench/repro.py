"""`perfbench repro RUN --filter F -o DIR`: one measured cell as a single-node ONNX model plus a
test-data folder in the standard ONNX layout, so a failing or losing cell can be handed to someone
and replayed (with `perfbench node`, or any ONNX runtime).

DIR/model.onnx                     the cell's node, in the cell's dtype, with the cell's attributes
DIR/test_data_set_0/input_K.pb     the exact input bytes the run measured (same seed, same generator)
DIR/test_data_set_0/output_K.pb    expected outputs: the float64 oracle (CONTRACTS §8) in the cell's dtype
DIR/cell.json                      the cell key, run, verdict, ratio, tolerances, the dtype ORT ran
                                   (a substituted dtype when ORT has no kernel in the cell's), and
                                   outputs that share an input's buffer (a KV cache bound as both)

The inputs are regenerated from the op's generator and the cell's seed; if the op's timing
definition (which covers the input generator) changed since the run, the bytes would differ and
repro refuses. Everything is built in memory first and written to a temporary folder renamed into
place, so a failure leaves no half-written folder. DIR may be a symlink to an empty folder: that
folder is the one replaced (the link keeps pointing at the result); a link to nothing is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from perfbench import dtypes, ops
from perfbench import filters as filt
from perfbench.errors import UsageError
from perfbench.ops import ort as ort_ops
from perfbench.store import models as m
from perfbench.store import repo


def find_cell(s, run_id: int, flts: list) -> m.Cell:
    """The one cell of the run that the filters select (CONTRACTS §5), or a clear error."""
    run = repo.load_run(s, run_id)
    filt.check_names(flts, {k for c in run.cells for k in c.case.params})  # a typo: "did you mean"
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


def _folder(out: Path) -> Path:
    """Where the repro folder goes. -o naming a symlink to a folder: the folder it points to (the
    user named the link; it must be empty like any other). A symlink to nothing or to a file is a
    UsageError, never a traceback."""
    if not out.is_symlink():
        return out
    if not out.is_dir():
        raise UsageError(f"{out} is a symbolic link to {os.readlink(out)}, which is not a folder: give -o a new "
                         "or empty folder")
    return Path(os.path.realpath(out))


def write(cell: m.Cell, out: Path) -> dict:
    """Write the repro folder for `cell`; returns what was written."""
    out = _folder(Path(out))
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} exists and is not an empty folder: repro writes a new folder, never over files")
    op = ops.get(cell.case.op)
    case = op.make_case(dict(cell.case.params))
    dt = dtypes.get(cell.dtype)
    ours, ort = cell.side("ours"), cell.side("ort")
    ort_dtype = (ort.dtype if ort and ort.dtype else cell.dtype)
    if op.timing_definition(case, cell.dtype, ort_dtype) != cell.timing_hash:
        raise UsageError(f"{op.name}'s definition (its input generator, shapes or ORT dtype) changed since run "
                         f"{cell.run_id} measured {cell.case.case_id}: the inputs made now would not be the bytes it "
                         "measured. Measure the cell again and repro that run.")
    inputs = op.make_inputs(case, dt, np.random.default_rng(cell.seed))
    graph = op.graph(case)
    oracle = op.oracle(case, op.oracle_inputs(case, inputs))
    names_in = [n for n, _, _ in graph.inputs if n and n not in graph.initializers]  # initializers: in the model
    names_out = [o[0] for o in graph.outputs if o[0]]
    out_types = op.output_dtypes(case, dt.numpy)
    missing = [n for n in names_out if n not in oracle]
    if missing:
        raise UsageError(f"{op.name}'s oracle has no {', '.join(missing)} for {cell.case.case_id}: cannot write "
                         "expected outputs (a bug in the op file)")
    model = onnx.load_from_string(ort_ops.build_model(graph, dt, copies=1, plain_names=True,
                                                      values=ort_ops.initializer_values(graph, inputs)))
    onnx.checker.check_model(model)
    files = {"model.onnx": model.SerializeToString()}
    for i, name in enumerate(names_in):
        files[f"test_data_set_0/input_{i}.pb"] = _tensor(name, inputs[name]).SerializeToString()
    for j, name in enumerate(names_out):
        expected = np.asarray(oracle[name]).astype(out_types[name])
        files[f"test_data_set_0/output_{j}.pb"] = _tensor(name, expected).SerializeToString()
    aliases = op.aliases(case)
    info = {
        "perfbench_repro": 1, "run": cell.run_id, "case_id": cell.case.case_id, "op": cell.case.op,
        "params": cell.case.params, "dtype": cell.dtype, "threads": cell.threads, "device": cell.device,
        "cache": cell.cache, "spin": cell.spin, "seed": cell.seed, "timing_hash": cell.timing_hash,
        "numerics_hash": cell.numerics_hash, "verdict": cell.verdict, "ratio": cell.ratio,
        "ci": [cell.ratio_lo, cell.ratio_hi], "ours": {"status": ours.status, "median_ns": ours.median_ns,
                                                        "message": ours.message} if ours else None,
        "ort": {"status": ort.status, "median_ns": ort.median_ns, "path": ort.path, "dtype": ort.dtype}
        if ort else None,
        "ort_dtype_note": (f"ORT has no kernel for this model's dtype {cell.dtype}: the run gave ORT the inputs "
                           f"converted to {ort_dtype} (a substituted dtype, CONTRACTS §2)"
                           if ort_dtype != cell.dtype else None),
        "numerics": {"err_ours": cell.err_ours, "err_ort": cell.err_ort, "tol": cell.tol, "floor": cell.floor},
        "node": {"op_type": graph.op_type, "domain": graph.domain or "", "opset": graph.opset,
                 "inputs": names_in, "outputs": names_out,
                 "aliases": aliases},  # output -> input it shares a buffer with (bound as both)
        "expected_outputs": "the float64 oracle (CONTRACTS §8) rounded to the cell's dtype"
                            + ("; aliased outputs are the whole shared buffer after the call" if aliases else ""),
    }
    files["cell.json"] = (json.dumps(info, indent=1, default=str) + "\n").encode()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        for rel, data in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's folder is private; the result is an ordinary folder
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"model": str(out / "model.onnx"), "inputs": len(names_in), "outputs": len(names_out), "info": info}
