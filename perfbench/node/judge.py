"""`perfbench node`, stage 3: judge our outputs against the reference (ORT run on the model as
given, the expected outputs, the op's float64 oracle), then time the node by the usual protocol."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx

from perfbench import dtypes, numerics
from perfbench.errors import NativeError
from perfbench.node.bind import NodeOp
from perfbench.node.load import Problem
from perfbench.ops import ort as ortlib

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_OURS_CANNOT, EXIT_NO_REFERENCE = 0, 1, 2, 3, 4

TOL_FACTOR = 2.0  # tolerance = TOL_FACTOR x the dtype's floor (the reference is rounded too)
DEFAULT_REPLICATES = 8  # as a suite's default (CONTRACTS §4)


@dataclass
class OutputCheck:
    name: str
    err: float
    where: tuple | None = None  # index of the worst element
    ours: float | None = None
    ref: float | None = None
    err_ort: float | None = None  # ORT vs the expected outputs
    err_oracle_ours: float | None = None
    err_oracle_ort: float | None = None


@dataclass
class Report:
    node: str
    op: str | None = None
    case: str | None = None
    dtype: str | None = None
    threads: int = 1
    inputs: list = field(default_factory=list)  # [(name, "given"/"generated"/"initializer", dtype, shape)]
    reference: str = ""  # "expected outputs" / "ORT" / ""
    tol: float | None = None
    ours_status: str = "ok"
    ours_message: str = ""
    ort_status: str = "not run"
    ort_message: str = ""
    checks: list = field(default_factory=list)
    timing: dict | None = None
    notes: list = field(default_factory=list)
    exit_code: int = 0
    saved: str | None = None
    saved_ours_as_expected: bool = False

    def to_dict(self) -> dict:
        from dataclasses import asdict

        from perfbench.compare.views import finite

        return finite(asdict(self))


def _worst(ours: np.ndarray, ref: np.ndarray, row: int) -> tuple:
    o = ours.astype(np.float64).reshape(-1)
    r = ref.astype(np.float64).reshape(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rows = r.reshape(-1, row) if row > 0 and r.size % row == 0 else r.reshape(1, -1)
        rms = np.sqrt(np.mean(np.where(np.isfinite(rows), rows, 0.0) ** 2, axis=1, keepdims=True))
        rms = np.maximum(rms, numerics.RMS_FLOOR_FRACTION * math.sqrt(float(np.mean(np.where(np.isfinite(r), r, 0) ** 2))))
        e = np.abs(o - r).reshape(rows.shape) / (np.abs(rows) + rms)
        same = ((o == r) | (np.isnan(o) & np.isnan(r))).reshape(rows.shape)  # NaN == NaN, inf == inf
        bad = (~np.isfinite(o) | ~np.isfinite(r)).reshape(rows.shape) & ~same
        e = np.where(same, 0.0, np.where(bad, np.inf, np.nan_to_num(e, nan=np.inf)))
    k = int(np.argmax(e))
    return tuple(int(x) for x in np.unravel_index(k, ours.shape)), float(o[k]), float(r[k])


def run_ort(prob: Problem, threads: int) -> tuple:
    """(status, message, {output name: array}) of ORT on the user's model as given."""
    model = onnx.ModelProto()
    model.CopyFrom(prob.model)
    if model.ir_version > 13:  # onnx >= 1.23 writes IR 14; ORT 1.31 reads at most 13
        model.ir_version = ortlib.IR_VERSION
    feeds = {n: prob.arrays[n] for n, _, _ in prob.graph_inputs}
    try:
        sess = ortlib.make_session(model.SerializeToString(), threads, "off")
    except Exception as e:  # noqa: BLE001 - ORT's failures are data
        if ortlib.is_missing_kernel(e):
            return "no-kernel", f"ORT has no CPU kernel for this node: {str(e).splitlines()[0][:300]}", None
        return "error", f"ORT cannot load the model: {str(e).splitlines()[0][:300]}", None
    names = [n for n, _, _ in prob.graph_outputs]
    try:
        # through OrtValues: ORT's numpy bridge knows no bfloat16 (ml_dtypes), IOBinding does
        values = {n: ortlib.ortvalue(np.asarray(a, order="C")) for n, a in feeds.items()}
        got = sess.run_with_ort_values(names, values)
        outs = {}
        binding = None
        for n, v in zip(names, got):
            if v.data_type() == "tensor(bfloat16)":
                if binding is None:
                    binding = sess.io_binding()
                    for k, val in values.items():
                        binding.bind_ortvalue_input(k, val)
                outs[n] = np.empty(v.shape(), dtypes.BF16.numpy)
                binding.bind_output(n, "cpu", 0, ortlib.element_type(outs[n]), list(outs[n].shape),
                                    outs[n].ctypes.data)
            else:
                outs[n] = np.asarray(v.numpy())
        if binding is not None:  # bf16 outputs: run again straight into our buffers
            for n in names:
                if n not in outs or outs[n].dtype != dtypes.BF16.numpy:
                    binding.bind_output(n, "cpu")
            sess.run_with_iobinding(binding)
    except Exception as e:  # noqa: BLE001
        return "error", f"ORT failed running the node: {str(e).splitlines()[0][:300]}", None
    return "ok", "", outs


def judge(prob: Problem, nop: NodeOp, ours: dict, ort_out: dict | None, rep: Report, floor: float) -> None:
    """Fill rep.checks and the exit code from our outputs against the reference: the expected
    outputs when given; else ORT's -- unless ORT departs from the op's float64 oracle by more
    than 10 x the floor (CONTRACTS §8: the oracle is the truth), then ORT's status is
    ort-discrepancy and ours is judged against the oracle."""
    rows = nop.row_sizes()
    tol = TOL_FACTOR * floor
    name_of = {f"o{j}": n for j, n in enumerate(prob.node.output)}
    graph_out = [n for n, _, _ in prob.graph_outputs]
    try:
        inputs = {f"i{k}": prob.arrays.get(n, prob.initializers.get(n)) for k, n in enumerate(prob.node.input) if n}
        oracle = nop.base.oracle(nop.binding.case, nop.base.oracle_inputs(nop.binding.case, nop.op_inputs(inputs)))
    except Exception:  # noqa: BLE001 - the oracle is a second opinion here, never required
        oracle = None
    oracle_of = {}
    for key, arr in ours.items():
        base_name = next((b for b, (idx, _) in nop.binding.outputs.items() if f"o{idx}" == key), None)
        if oracle is not None and base_name in oracle:
            oracle_of[name_of[key]] = np.asarray(oracle[base_name]).reshape(arr.shape)
    ref = prob.expected
    rep.reference = "expected outputs" if ref is not None else ""
    if ref is None and ort_out is not None:
        off = [n for n in graph_out if n in oracle_of and ort_out[n].shape == oracle_of[n].shape
               and not numerics.error(ort_out[n], oracle_of[n], rows[f"o{list(prob.node.output).index(n)}"]) <= 10 * floor]
        if off and len(oracle_of) == len([n for n in graph_out]):
            ref, rep.reference = oracle_of, "float64 oracle (ORT departs from it)"
            rep.ort_status = "ort-discrepancy"
            rep.ort_message = (f"ORT departs from the op's float64 oracle on {', '.join(off)} by more than 10 x the "
                               f"floor ({10 * floor:g}); ours is judged against the oracle")
        else:
            ref, rep.reference = ort_out, "ORT"
    rep.tol = tol if ref is not None else None
    failed, ort_bad = [], []
    for key, arr in ours.items():
        gname = name_of[key]
        if gname not in graph_out:
            continue
        row = rows[key]
        chk = OutputCheck(gname, math.nan)
        if gname in oracle_of:
            chk.err_oracle_ours = numerics.error(arr, oracle_of[gname], row)
            if ort_out is not None:
                chk.err_oracle_ort = numerics.error(ort_out[gname], oracle_of[gname], row)
        if ref is not None:
            r = np.asarray(ref[gname])
            if r.shape != arr.shape:
                chk.err = math.inf
                rep.notes.append(f"output {gname!r}: ours has shape {arr.shape}, the reference {r.shape}")
            else:
                chk.err = numerics.error(arr, r, row)
                if not chk.err <= tol:
                    chk.where, chk.ours, chk.ref = _worst(arr, r, row)
            if prob.expected is not None and ort_out is not None:
                chk.err_ort = numerics.error(ort_out[gname], r, row) if ort_out[gname].shape == r.shape else math.inf
                if not chk.err_ort <= tol:
                    ort_bad.append(gname)
            if not chk.err <= tol:
                failed.append(gname)
        rep.checks.append(chk)
    if ref is None:
        rep.exit_code = EXIT_NO_REFERENCE
    elif failed:
        rep.exit_code = EXIT_MISMATCH
    else:
        rep.exit_code = EXIT_OK
    # ORT's discrepancy: ORT disagrees with the expected outputs where ours agrees with them
    discrepant = [n for n in ort_bad if n not in failed]
    both = [n for n in ort_bad if n in failed]
    if discrepant and rep.ort_status == "ok":
        rep.ort_status = "ort-discrepancy"
        rep.ort_message = (f"ORT departs from the expected outputs on {', '.join(discrepant)} "
                           f"(err > tol {tol:.3g}) where ours agrees with them")
    if both:
        rep.notes.append(f"ORT disagrees with the expected outputs on {', '.join(both)} as well: check that they "
                         "were computed with this node's semantics (opset, attributes)")


# ------------------------------------------------------------------------------- timing ----
def time_node(lib, nop: NodeOp, prob: Problem, threads: int, replicates: int, progress=lambda s: None) -> dict:
    """The usual warm protocol of a cell (interleaved replicates, ours in the native loop, ORT's
    differential K-copy estimate) on the node's own inputs. ORT runs the node in its dtype, else
    in the op's declared substitute (CONTRACTS §2, as `perfbench run` does); ours is timed alone
    when ORT runs neither."""
    from perfbench.compare import change, verdicts
    from perfbench.timing.protocol import CellOutcome, CellSpec, Harness, OrtSideError, OursSideError

    dt = dtypes.get(nop.info.dtype)
    inputs = {f"i{k}": prob.arrays.get(n, prob.initializers.get(n)) for k, n in enumerate(prob.node.input) if n}
    spec = CellSpec(op=nop.name, params=[], dtype=dt.name, threads=threads, replicates=replicates)
    h = Harness(lib, progress=lambda phase, **facts: progress(phase))
    graph = nop.graph()
    out = CellOutcome(isa=lib.isa_active)
    try:
        ort_dt, _ = ortlib.first_session(nop, graph, dt, threads, "off", inputs)
    except Exception:  # noqa: BLE001 - ORT cannot load it in any dtype: ours alone
        ort_dt = None
    res = {"ours_median_ns": None, "ort_median_ns": None, "replicates": replicates, "K": None, "ratio": None,
           "ci": None, "verdict": None, "verdict_note": "", "ort_dtype": ort_dt.name if ort_dt else None,
           "bytes": nop.bytes_moved(None, dt), "flops": nop.flops(), "bound": nop.bound,
           "ours_gbps": None, "ort_gbps": None}
    try:
        if ort_dt is not None:
            h.time_warm(nop, None, dt, ort_dt, graph, nop.output_shapes(), inputs, spec, {"ours": lib}, {"ours": out})
            out.ours_status = out.ort_status = "ok"
            h.check_resolution(out)
            # a user's node is in no calibration: the stated default between-run spread is folded
            # in, as a run's uncalibrated cells have it (CONTRACTS §4), so node's win is a run's win
            sigma, sigma_dof, _ = change.sigma_prior(None, "ratio")
            v = verdicts.decide(out.ours_status, out.ort_status, out.ours_ns, out.ort_ns,
                                groups=out.process or None, sigma_b=sigma, sigma_dof=sigma_dof)
            res.update(K=out.K, sigma_b=sigma, ratio=v.ratio, ci=[v.lo, v.hi] if v.ratio is not None else None, verdict=v.verdict,
                       verdict_note=v.note + (f"; ORT ran {ort_dt.name} (no {dt.name} kernel)" if ort_dt != dt else ""))
            res["ort_median_ns"] = float(np.median(out.ort_ns))
            if ort_dt != dt:
                res["ort_gbps"] = nop.bytes_moved(None, ort_dt) / res["ort_median_ns"] if res["ort_median_ns"] > 0 else None
        else:
            call = nop.prepare_ours(lib, None, {k: v.copy() for k, v in inputs.items()},
                                    nop.new_outputs(None, dt.numpy, inputs), threads)
            call.run()
            one = max(min(call.time_warm(1) for _ in range(3)), 1)
            iters = int(max(1, math.ceil(spec.block_ms * 1e6 / one)))
            floor_ns = h.ours_warm_floor(threads)
            out.ours_ns = [call.time_warm(iters) / iters - floor_ns for _ in range(replicates)]
            res["verdict_note"] = "ORT cannot run the node in any dtype: ours timed alone"
    except (OrtSideError, OursSideError, NativeError) as e:
        res["verdict_note"] = f"timing failed: {e}"
        return res
    res["ours_median_ns"] = float(np.median(out.ours_ns))
    if res["ours_median_ns"] > 0:
        res["ours_gbps"] = res["bytes"] / res["ours_median_ns"]
    if res["ort_median_ns"] and res["ort_gbps"] is None and res["ort_median_ns"] > 0:
        res["ort_gbps"] = res["bytes"] / res["ort_median_ns"]
    return res
