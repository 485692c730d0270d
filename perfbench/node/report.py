"""`perfbench node`, stage 4: report: the --save folder (model, inputs used, outputs) and the
terminal rendering of a Report."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from perfbench.errors import UsageError
from perfbench.node.judge import Report
from perfbench.node.load import Problem


# --------------------------------------------------------------------------------- save ----
def check_save(folder: str, data: str | None) -> Path:
    """The --save folder, checked before any work: a new folder (or an empty one), never the
    --data folder, in a parent that exists."""
    out = Path(folder).resolve()
    if data is not None and out == Path(data).resolve():
        raise UsageError(f"--save {folder} is the --data folder: --save writes a new folder, never over the data")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--save {folder}: exists and is not an empty folder (it writes a new folder)")
    if not out.parent.is_dir():
        raise UsageError(f"--save {folder}: the parent folder {out.parent} does not exist")
    return out


def save(prob: Problem, ours: dict, reference: dict | None, matched: bool, folder: str, data: str | None) -> str:
    """DIR/model.onnx (the model, external data inlined), DIR/input_K.pb (the inputs used) and
    our outputs: as DIR/output_K.pb when they matched the reference (a replay then checks
    against them), else as DIR/ours_output_K.pb, with the reference (if any) as output_K.pb.
    Written to a temporary folder, then moved into place."""
    out = check_save(folder, data)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".perfbench-node-", dir=out.parent))
    except OSError as e:
        raise UsageError(f"--save {folder}: cannot write in {out.parent} ({e.strerror})") from e
    try:
        onnx.save(prob.model, str(tmp / "model.onnx"))
        for k, (name, _, _) in enumerate(prob.graph_inputs):
            (tmp / f"input_{k}.pb").write_bytes(numpy_helper.from_array(prob.arrays[name], name).SerializeToString())
        name_of = {n: f"o{j}" for j, n in enumerate(prob.node.output)}
        for k, (name, _, _) in enumerate(prob.graph_outputs):
            arr = np.asarray(ours[name_of[name]], order="C")
            mine = numpy_helper.from_array(arr, name).SerializeToString()
            if matched:
                (tmp / f"output_{k}.pb").write_bytes(mine)
                continue
            (tmp / f"ours_output_{k}.pb").write_bytes(mine)
            if reference is not None:
                ref = np.asarray(np.asarray(reference[name]).astype(arr.dtype), order="C")
                (tmp / f"output_{k}.pb").write_bytes(numpy_helper.from_array(ref, name).SerializeToString())
        os.chmod(tmp, 0o755)
        if out.exists():  # an empty folder: move the files in
            for f in tmp.iterdir():
                os.rename(f, out / f.name)
            tmp.rmdir()
        else:
            os.rename(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UsageError(f"--save {folder}: {e.strerror or e}") from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return str(out)

# ------------------------------------------------------------------------------ printing ----
def _fmt_ns(ns) -> str:
    if ns is None:
        return "-"
    return f"{ns / 1000:.2f} us" if ns >= 1000 else f"{ns:.0f} ns"


def render(rep: Report) -> str:
    lines = [f"node: {rep.node}" + (f" -> our {rep.op} as {rep.case}" if rep.op else "")
             + (f", {rep.dtype}" if rep.dtype else "") + f", threads={rep.threads}"]
    for name, src, dt, shape in rep.inputs:
        lines.append(f"  input {name}: {dt}{tuple(shape)} ({src})")
    if rep.ours_status == "unsupported":
        lines.append(f"ours: cannot run this node: {rep.ours_message}")
    elif rep.ours_status == "error":
        lines.append(f"ours: error: {rep.ours_message}")
    ort = rep.ort_status + (f": {rep.ort_message}" if rep.ort_message else "")
    lines.append(f"ORT: {ort}")
    if rep.checks:
        lines.append(f"reference: {rep.reference}; tolerance {rep.tol:.3g} (2 x the {rep.dtype} floor)" if rep.tol
                     else "reference: none")
        for c in rep.checks:
            s = (f"  output {c.name}: err(ours vs reference) = {c.err:.3g}" if rep.reference
                 else f"  output {c.name}: no reference")
            if c.err_ort is not None:
                s += f", err(ORT vs expected) = {c.err_ort:.3g}"
            if c.err_oracle_ours is not None:
                s += f"; vs the float64 oracle: ours {c.err_oracle_ours:.3g}" + (
                    f", ORT {c.err_oracle_ort:.3g}" if c.err_oracle_ort is not None else "")
            lines.append(s)
            if c.where is not None:
                lines.append(f"    worst at index {c.where}: ours {c.ours:.6g}, reference {c.ref:.6g}")
    if rep.timing:
        t = rep.timing
        lines.append(f"timing ({t['replicates']} replicates, warm" + (f", ORT K={t['K']} copies" if t["K"] else "")
                     + f"): ours {_fmt_ns(t['ours_median_ns'])}"
                     + (f", ORT {_fmt_ns(t['ort_median_ns'])}" if t["ort_median_ns"] is not None else "")
                     + (f" (ORT in {t['ort_dtype']})" if t["ort_dtype"] and t["ort_dtype"] != rep.dtype else ""))
        if t["ratio"] is not None:
            lines.append(f"  ours/ORT {t['ratio']:.3f} [{t['ci'][0]:.3f}, {t['ci'][1]:.3f}] -> {t['verdict']}"
                         + (f" (95% CI with a {100 * t['sigma_b']:.0f}% between-run spread)" if t.get("sigma_b") else "")
                         + (f" ({t['verdict_note']})" if t["verdict_note"] else ""))
        elif t["verdict_note"]:
            lines.append(f"  {t['verdict_note']}")
        if t["bound"] in ("memory", "roofline") and t["ours_gbps"]:
            lines.append(f"  {t['bytes'] / 1e6:.3g} MB moved: ours {t['ours_gbps']:.1f} GB/s"
                         + (f", ORT {t['ort_gbps']:.1f} GB/s" if t["ort_gbps"] else ""))
    for n in rep.notes:
        lines.append(f"note: {n}")
    if rep.saved:
        what = ("our outputs as output_K.pb" if rep.saved_ours_as_expected else
                "our outputs as ours_output_K.pb (they did not match" + (", the reference is output_K.pb)"
                                                                        if rep.reference else ")"))
        lines.append(f"saved the model, the inputs used and {what} to {rep.saved}/ (replay: perfbench node "
                     f"{rep.saved}/model.onnx --data {rep.saved})")
    verdict = {0: "PASS: ours matches the reference", 1: "FAIL: numerics mismatch",
               2: "ERROR", 3: "CANNOT RUN: our library cannot run this node",
               4: "NO REFERENCE: ORT cannot run the node and no expected outputs were given"}[rep.exit_code]
    lines.append(f"{verdict} (exit {rep.exit_code})")
    return "\n".join(lines)
