"""ONNX Trilu (opset 14): the upper (upper=1: col - row >= k) or lower (upper=0: col - row <= k)
triangle of each (rows, cols) matrix of a batch, the rest zeroed; k is the optional int64
scalar input. Exported models build causal attention masks with it (upper, k = 1)."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi import movement as mvk
from perfbench.ops import _movement as mv
from perfbench.ops import _node_helpers as nh
from perfbench.ops import _reference as ref
from perfbench.ops.base import Case, GraphSpec, Mutant, NodeBinding, NodeInfo, NodeUnsupported, Op, Param, register


def _shape(case: Case) -> tuple:
    p = case.p
    return (p["batch"], p["rows"], p["cols"])


def _tri(x, upper: int, k: int) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return np.triu(x, k) if upper else np.tril(x, k)


def _m_k_off(op, case, x):
    return {"y": _tri(x["x"], case.p["upper"], case.p["k"] + 1)}


def _m_swapped(op, case, x):
    return {"y": _tri(x["x"], 1 - case.p["upper"], case.p["k"])}


def _m_last_unmasked(op, case, x):
    # the last matrix of the batch copied without its mask
    y = _tri(x["x"], case.p["upper"], case.p["k"])
    y[-1] = np.asarray(x["x"][-1], np.float64)
    return {"y": y}


def kept_elements(case: Case) -> int:
    """Elements Trilu keeps over the batch: per row i the columns with col - i >= k (upper) or
    <= k (lower), as the kernel's pb_mv_trilu_keep counts them."""
    p = case.p
    cols = p["cols"]
    d = np.arange(p["rows"], dtype=np.int64) + max(-(p["rows"] + cols), min(p["rows"] + cols, p["k"]))
    per_row = cols - np.clip(d, 0, cols) if p["upper"] else np.clip(d + 1, 0, cols)
    return int(per_row.sum()) * p["batch"]


def _masks_something(case) -> bool:
    p = case.p
    return not np.array_equal(_tri(np.ones(_shape(case)[1:]), p["upper"], p["k"]), np.ones(_shape(case)[1:]))


def _differs(k_delta=0, flip=False):
    def applies(case) -> bool:
        p = case.p
        ones = np.ones(_shape(case)[1:])
        a = _tri(ones, p["upper"], p["k"])
        b = _tri(ones, 1 - p["upper"] if flip else p["upper"], p["k"] + k_delta)
        return not np.array_equal(a, b)
    return applies


@register
class Trilu(Op):
    name = "Trilu"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    kernel_signed_args = ("k",)  # the diagonal offset: any sign
    test_cases = (
        {"batch": 3, "rows": 33, "cols": 65, "upper": 0, "k": -2},
        {"rows": 17, "cols": 9, "upper": 1, "k": 5},
        {"batch": 2, "rows": 8, "cols": 8, "upper": 1, "k": 1},
        {"rows": 700, "cols": 650, "upper": 0, "k": -3},  # 2 threads really split it
    )
    kernel = "trilu"
    params = (
        Param("batch", int, 1, minimum=1, help="matrices"),
        Param("rows", int, None, minimum=1, help="rows of each matrix"),
        Param("cols", int, None, minimum=1, help="columns of each matrix"),
        Param("upper", int, 1, choices=(0, 1), help="1: keep col - row >= k; 0: keep col - row <= k"),
        Param("k", int, 0, help="diagonal offset"),
    )
    # ORT: an f32 kernel, f16 through inserted Casts (still ORT's f16 cell), no bf16 kernel
    ort_substitute = {"bf16": "f32"}
    mutants = (
        Mutant("diagonal off by one", _m_k_off, _differs(k_delta=1)),
        Mutant("upper and lower swapped", _m_swapped, _differs(flip=True)),
        Mutant("last matrix not masked", _m_last_unmasked, _masks_something),
    )
    node_types = (("", "Trilu"),)

    def graph(self, case: Case) -> GraphSpec:
        return GraphSpec("Trilu", "", 14, [("x", "float", _shape(case)), ("k", "int64", ())], [("y", _shape(case))],
                         {"upper": case.p["upper"]})

    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        p = case.p
        x = rng.standard_normal(_shape(case))
        # probes: the kept diagonal (col - row == k) and its masked neighbour stand out, in the
        # first and the last matrix
        for b in {0, p["batch"] - 1}:
            for i in range(p["rows"]):
                for j, v in ((i + p["k"], 4.0), (i + p["k"] + (-1 if p["upper"] else 1), -4.0)):
                    if 0 <= j < p["cols"]:
                        x[b, i, j] += v
        return {"x": np.ascontiguousarray(x.astype(dtype.numpy)), "k": np.array(p["k"], np.int64)}

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        return mvk.trilu(lib, inputs["x"], outputs["y"], case.p["upper"], int(inputs["k"]), threads, device=device)

    def oracle(self, case: Case, inputs: dict) -> dict:
        return {"y": ref.evaluate("Trilu", [inputs["x"], inputs["k"]], opset=14, upper=case.p["upper"])[0]}

    def row_sizes(self, case: Case) -> dict:
        return {"y": case.p["cols"]}

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        # what the op must move: the kept triangle read, every element written (the masked ones
        # as zeros). Counting the whole input read put our kernel, which reads only the kept
        # part, at up to 122% of the read ceiling (upper=1 k=1, a causal mask: half is masked)
        return (kept_elements(case) + mv.prod(_shape(case))) * float(dtype.itemsize)

    def from_node(self, node: NodeInfo) -> NodeBinding:
        ins = nh.node_inputs(node, "Trilu node", 1, 2)
        nh.node_float_dtype(node, "Trilu node")
        shape = nh.node_shape(node, 0, "Trilu node")
        if len(shape) < 2:
            raise UsageError(f"Trilu node: input must have rank >= 2, got shape {shape}")
        upper = int(node.attr("upper", 1))
        if upper not in (0, 1):
            raise UsageError(f"Trilu node: upper={upper}, expected 0 or 1")
        k = 0
        inputs = {"x": 0}
        if len(ins) > 1 and ins[1] is not None:
            v = node.value(1)
            if v is None:
                raise NodeUnsupported("Trilu with a k input whose value is not known (not an initializer; give it with "
                                      "--data)")
            v = np.asarray(v)
            if v.size != 1 or v.dtype.kind not in "iu":
                raise UsageError(f"Trilu node: k must be an int64 scalar, got {v.dtype}{v.shape}")
            k = int(v.reshape(-1)[0])
            inputs["k"] = 1
        rows, cols = shape[-2], shape[-1]
        k = max(-(rows + cols), min(rows + cols, k))  # beyond this every k gives the same result
        case = self.make_case({"batch": mv.prod(shape[:-2]), "rows": rows, "cols": cols, "upper": upper, "k": k},
                              "Trilu node")
        return NodeBinding(case, inputs, {"y": (0, shape)})
