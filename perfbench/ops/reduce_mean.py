"""ai.onnx ReduceMean (opset 18: axes is an int64 input) over one run of adjacent axes: the last
axis ("last"), every axis ("all", the axes input left out), or axes i..j ("i-j"); keepdims 0/1.

Normalization row: the whole output. A mean of ~zero-mean data is a cancellation whose relative
error means nothing, so the inputs carry an offset per output element (|offset| in [0.5, 1.5])
and every output's error is measured against the RMS of all the means."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi import eltwise
from perfbench.ops import _eltwise as el
from perfbench.ops import _node_helpers as nh
from perfbench.ops import _reference as ref
from perfbench.ops.base import Case, GraphSpec, Mutant, NodeBinding, NodeInfo, NodeUnsupported, Op, Param, register


def _axes(case: Case) -> list[int]:
    """The reduced axes, sorted, in [0, rank)."""
    rank = len(el.parse_shape(case.p["shape"]))
    spec = case.p["axes"]
    if spec == "all":
        return list(range(rank))
    if spec == "last":
        return [rank - 1]
    lo, hi = (int(v) for v in spec.split("-"))
    return list(range(lo, hi + 1))


def _span(case: Case) -> tuple[int, int, int]:
    shape = el.parse_shape(case.p["shape"])
    return eltwise.reduce_span(shape, _axes(case)) if shape else (1, 1, 1)


def _out_shape(case: Case) -> tuple:
    shape, axes = el.parse_shape(case.p["shape"]), set(_axes(case))
    if case.p["keepdims"]:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def _axes_input(case: Case) -> np.ndarray | None:
    """The axes input: [-1] for "last", i..j for a range, none for "all" (reduce everything)."""
    if case.p["axes"] == "all":
        return None
    if case.p["axes"] == "last":
        return np.array([-1], np.int64)
    return np.array(_axes(case), np.int64)


def _onnx_reference(x: np.ndarray, axes, keepdims: int) -> np.ndarray:
    """onnx.reference's ReduceMean-18 on float64 inputs (numpy's pairwise float64 mean)."""
    return np.asarray(ref.evaluate("ReduceMean", [x] + ([axes] if axes is not None else []), opset=18,
                                   keepdims=keepdims)[0], np.float64)




def _as3(case: Case, x: np.ndarray) -> np.ndarray:
    return x.reshape(_span(case))


def _mean3(case: Case, x3: np.ndarray, *, count: int | None = None) -> np.ndarray:
    """Mean over the middle axis of an (outer, R, inner) view, shaped as the output."""
    r = x3.shape[1]
    return (x3.sum(axis=1) / (count if count is not None else r)).reshape(_out_shape(case))


def _m_tail(op, case, x):
    # the last partial vector of each reduced run never added (the count stays R)
    x3 = _as3(case, x["data"])
    r = x3.shape[1]
    return {"reduced": _mean3(case, x3[:, : r - el.tail_len(r), :], count=r)}


def _m_n_minus_1(op, case, x):
    x3 = _as3(case, x["data"])
    return {"reduced": _mean3(case, x3, count=x3.shape[1] - 1)}


def _m_zero_last(op, case, x):
    y = _onnx_reference(x["data"], _axes_input(case), case.p["keepdims"])
    y.reshape(-1)[-1] = 0.0
    return {"reduced": y}


# a mean over R elements off by 1/R must show in bf16 (floor 1.6e-2): R <= 40
_SMALL_R = 40


@register
class ReduceMean(Op):
    name = "ReduceMean"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"shape": "7x1031", "axes": "last"},
        {"shape": "9x33", "axes": "last", "keepdims": 0},
        {"shape": "3x100x70", "axes": "1-1"},
        {"shape": "5x7x33", "axes": "1-2", "keepdims": 0},
        {"shape": "1031", "axes": "all"},
        {"shape": "300007", "axes": "all"},  # one row split across 2 threads
        {"shape": "300x1031", "axes": "last"},  # rows across 2 threads
        {"shape": "4194311", "axes": "all"},  # the long sum
    )
    kernel = "reduce_mean"
    # bf16 only: ORT runs f16 through Casts around its f32 kernel, which is what f16 cells meet
    ort_substitute = {"bf16": "f32"}
    params = (
        Param("shape", str, None, help="input shape, sizes joined by 'x' (e.g. 64x4096)"),
        Param("axes", str, "last", help="'last', 'all', or 'i-j' (axes i..j, adjacent)"),
        Param("keepdims", int, 1, choices=(0, 1), help="1: reduced axes kept with size 1"),
    )
    mutants = (
        Mutant("tail elements ignored", _m_tail, lambda case: _span(case)[2] == 1),
        Mutant("divided by n - 1", _m_n_minus_1, lambda case: 1 < _span(case)[1] <= _SMALL_R),
        Mutant("last output zeroed", _m_zero_last, lambda case: _span(case)[0] * _span(case)[2] > 1),
    )

    def validate(self, case: Case, where: str) -> None:
        shape = el.parse_shape(case.p["shape"], where)
        spec = case.p["axes"]
        if spec in ("all", "last"):
            if not shape and spec == "last":
                raise UsageError(f"{where}: a scalar has no last axis (use axes='all')")
            return
        parts = spec.split("-")
        try:
            lo, hi = (int(v) for v in parts)
        except ValueError:
            raise UsageError(f"{where}: axes={spec!r}, expected 'last', 'all' or 'i-j' (e.g. 1-2)") from None
        if f"{lo}-{hi}" != spec or not 0 <= lo <= hi < len(shape):
            raise UsageError(f"{where}: axes={spec!r} must be i-j with 0 <= i <= j < rank {len(shape)}")

    def graph(self, case: Case) -> GraphSpec:
        shape = el.parse_shape(case.p["shape"])
        axes = _axes_input(case)
        inputs = [("data", "float", shape)] + ([("axes", "int64", (len(axes),))] if axes is not None else [])
        return GraphSpec("ReduceMean", "", 18, inputs, [("reduced", _out_shape(case))],
                         {"keepdims": case.p["keepdims"]})

    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        shape = el.parse_shape(case.p["shape"])
        outer, r, inner = _span(case)
        offset = rng.choice([-1.0, 1.0], (outer, 1, inner)) * (0.5 + rng.random((outer, 1, inner)))
        x3 = rng.standard_normal((outer, r, inner)) + offset
        # planted probes: the last (up to) 16 elements of every reduced run carry a large value,
        # so a dropped tail moves each mean by >= ~0.1 (16-bit formats included)
        m = min(16, r)
        x3[:, r - m:, :] += float(np.clip(r / 128.0, 4.0, 30000.0))
        out = {"data": np.asarray(x3.reshape(shape).astype(dtype.numpy), order="C")}  # 0-d stays 0-d
        axes = _axes_input(case)
        if axes is not None:
            out["axes"] = axes
        return out

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        return eltwise.reduce_mean(lib, inputs["data"], outputs["reduced"], axes=_axes(case), threads=threads,
                                   device=device)

    def oracle(self, case: Case, inputs: dict) -> dict:
        return {"reduced": _onnx_reference(inputs["data"], _axes_input(case), case.p["keepdims"])}

    def row_sizes(self, case: Case) -> dict:
        return {"reduced": el.size(_out_shape(case))}

    def flops(self, case: Case) -> float:
        return float(el.size(el.parse_shape(case.p["shape"])))

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        n_in = el.size(el.parse_shape(case.p["shape"]))
        axes = _axes_input(case)
        return float(n_in + el.size(_out_shape(case))) * dtype.itemsize + (8.0 * len(axes) if axes is not None else 0.0)

    # ---- perfbench node ----
    node_types = (("", "ReduceMean"),)

    def from_node(self, node: NodeInfo) -> NodeBinding:
        what = f"ReduceMean (opset {node.opset})"
        new = node.opset >= 18
        ins = nh.node_inputs(node, what, 1, 2 if new else 1)
        nh.check_outputs(node, what)
        nh.node_float_dtype(node, what)
        shape = tuple(ins[0][1])
        keepdims = int(node.attr("keepdims", 1))
        if keepdims not in (0, 1):
            raise UsageError(f"{what}: keepdims={keepdims}, expected 0 or 1")
        noop = int(node.attr("noop_with_empty_axes", 0)) if new else 0
        if new:
            if node.attr("axes") is not None:
                raise UsageError(f"{what}: axes is an input from opset 18, not an attribute")
            if ins[1] is None:
                axes = []
            else:
                value = node.value(1)
                if value is None:
                    raise NodeUnsupported(f"{what}: the axes input is not a known constant (an initializer, or given "
                                          "with --data)")
                axes = [int(v) for v in np.asarray(value).reshape(-1)]
        else:
            axes = [int(v) for v in (node.attr("axes") or [])]
        if not axes and noop:
            raise NodeUnsupported(f"{what}: noop_with_empty_axes=1 with empty axes (an identity) is not implemented")
        if 0 in shape:
            raise NodeUnsupported(f"{what}: zero-size input {shape} is not implemented")
        rank = len(shape)
        try:
            norm = eltwise.normalize_axes(rank, axes)
        except UsageError as e:
            raise UsageError(f"{what}: {e}") from None
        if norm and norm != list(range(norm[0], norm[-1] + 1)):
            raise NodeUnsupported(f"{what}: axes {norm} are not adjacent (only one run of adjacent axes is implemented)")
        if norm == list(range(rank)):
            spec = "all"
        elif norm == [rank - 1]:
            spec = "last"
        else:
            spec = f"{norm[0]}-{norm[-1]}"
        case = self.make_case({"shape": el.shape_str(shape), "axes": spec, "keepdims": keepdims}, what)
        inputs = {"data": 0}
        if new and ins[1] is not None and spec != "all":
            inputs["axes"] = 1
        return NodeBinding(case, inputs, {"reduced": (0, _out_shape(case))})
