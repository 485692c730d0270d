"""ai.onnx Gemm (opset 13): Y = alpha * A' @ B' + beta * C, A' = A or A^T (transA), B' = B or B^T
(transB), C optional and broadcast to (M, N) (a scalar, a row (N), a column (M, 1) or the whole
(M, N)). The kernel is MatMul's (pb_matmul). B (and C) is a runtime input or, as a model's weight,
a constant initializer (`b_form`): ORT prepacks B at session creation, we pack it once outside the
timed call."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi import matmul as mm
from perfbench.ops import _eltwise as el
from perfbench.ops import _node_helpers as nh
from perfbench.ops.base import (
    Case,
    GraphSpec,
    Mutant,
    NodeBinding,
    NodeInfo,
    NodeUnsupported,
    Op,
    Param,
    register,
    tail_len,
)
from perfbench.ops.matmul import B_FORMS, MEMORY_BOUND_MAX_M

C_FORMS = ("none", "scalar", "row", "col", "full")


def _c_shape(case: Case) -> tuple | None:
    p = case.p
    return {"none": None, "scalar": (1,), "row": (p["n"],), "col": (p["m"], 1), "full": (p["m"], p["n"])}[p["c"]]


def _shapes(case: Case) -> tuple:
    p = case.p
    a = (p["k"], p["m"]) if p["trans_a"] else (p["m"], p["k"])
    b = (p["n"], p["k"]) if p["trans_b"] else (p["k"], p["n"])
    return a, b


def _ab(case: Case, x: dict) -> tuple:
    a = x["A"].T if case.p["trans_a"] else x["A"]
    b = x["B"].T if case.p["trans_b"] else x["B"]
    return a, b


def _gemm64(case: Case, x: dict, alpha: float | None = None, beta: float | None = None, trans_b=None) -> np.ndarray:
    a, b = _ab(case, x)
    if trans_b is not None:
        b = x["B"].T if trans_b else x["B"]
    al = Gemm.alpha(case) if alpha is None else alpha
    be = Gemm.beta(case) if beta is None else beta
    y = al * (a @ b)
    if "C" in x:
        y = y + be * x["C"]
    return y


def _m_alpha_ignored(op, case, x):
    return {"Y": _gemm64(case, x, alpha=1.0)}


def _m_beta_ignored(op, case, x):
    return {"Y": _gemm64(case, x, beta=1.0)}


def _m_trans_b_ignored(op, case, x):
    # B read as stored: only conformant where it is square
    return {"Y": _gemm64(case, x, trans_b=not case.p["trans_b"])}


def _m_c_broadcast_wrong(op, case, x):
    # a row C added down the columns instead (C[i] for row i): a broadcast along the wrong axis
    a, b = _ab(case, x)
    c = x["C"].reshape(-1)[: case.p["m"]].reshape(-1, 1)
    return {"Y": Gemm.alpha(case) * (a @ b) + Gemm.beta(case) * c}


def _m_k_tail(op, case, x):
    a, b = _ab(case, x)
    k = case.p["k"]
    cut = tail_len(k)
    y = Gemm.alpha(case) * (a[:, : k - cut] @ b[: k - cut])
    return {"Y": y + Gemm.beta(case) * x["C"] if "C" in x else y}


@register
class Gemm(Op):
    name = "Gemm"
    kernel = "matmul"
    params = (
        Param("m", int, None, minimum=1, help="rows of Y"),
        Param("k", int, None, minimum=1, help="the inner dimension"),
        Param("n", int, None, minimum=1, help="columns of Y"),
        Param("trans_a", int, 0, choices=(0, 1), help="transA: A stored (K, M)"),
        Param("trans_b", int, 0, choices=(0, 1), help="transB: B stored (N, K), as nn.Linear weights"),
        Param("alpha", str, "1.0", help="alpha, canonical float32 text"),
        Param("beta", str, "1.0", help="beta, canonical float32 text"),
        Param("c", str, "none", choices=C_FORMS, help="C: none, scalar, row (N), col (M, 1) or full (M, N)"),
        Param("b_form", str, "input", choices=B_FORMS, help="input, or initializer (B and C model constants)"),
    )
    bound = "compute"
    kernel_optional_args = ("b", "b_packed", "c")
    test_cases = (
        {"m": 3, "k": 33, "n": 5, "c": "row", "alpha": "0.5", "beta": "-2.0"},
        {"m": 7, "k": 17, "n": 9, "trans_a": 1, "trans_b": 1, "c": "col", "alpha": "1.5", "beta": "0.25"},
        {"m": 1, "k": 37, "n": 21, "trans_b": 1, "c": "full", "b_form": "initializer", "beta": "0.5"},
        {"m": 5, "k": 9, "n": 9, "trans_b": 1, "c": "scalar", "alpha": "2.0", "beta": "3.0"},
        {"m": 6, "k": 20, "n": 11, "b_form": "initializer"},
        {"m": 64, "k": 200, "n": 96, "trans_b": 1, "c": "row", "b_form": "initializer"},  # 2 threads split it
    )
    mutants = (
        Mutant("alpha ignored", _m_alpha_ignored, lambda case: float(case.p["alpha"]) != 1.0),
        Mutant("beta ignored", _m_beta_ignored, lambda case: case.p["c"] != "none" and float(case.p["beta"]) != 1.0),
        Mutant("transB ignored", _m_trans_b_ignored, lambda case: case.p["k"] == case.p["n"] and case.p["k"] > 1),
        Mutant("C broadcast along the wrong axis", _m_c_broadcast_wrong,
               lambda case: case.p["c"] == "row" and case.p["m"] <= case.p["n"] and case.p["m"] > 1),
        Mutant("K tail dropped", _m_k_tail, lambda case: case.p["k"] > 1),
    )

    @staticmethod
    def alpha(case: Case) -> float:
        return el.parse_float32(case.p["alpha"], case.op, "alpha")

    @staticmethod
    def beta(case: Case) -> float:
        return el.parse_float32(case.p["beta"], case.op, "beta")

    def validate(self, case: Case, where: str) -> None:
        el.parse_float32(case.p["alpha"], where, "alpha")
        el.parse_float32(case.p["beta"], where, "beta")

    def graph(self, case: Case) -> GraphSpec:
        a, b = _shapes(case)
        ins = [("A", "float", a), ("B", "float", b)]
        c = _c_shape(case)
        if c is not None:
            ins.append(("C", "float", c))
        inits = (("B", "C") if c is not None else ("B",)) if case.p["b_form"] == "initializer" else ()
        attrs = {"alpha": self.alpha(case), "beta": self.beta(case), "transA": case.p["trans_a"],
                 "transB": case.p["trans_b"]}
        return GraphSpec("Gemm", "", 13, ins, [("Y", (case.p["m"], case.p["n"]))], attrs, initializers=inits)

    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        a_shape, b_shape = _shapes(case)
        k = case.p["k"]
        A = rng.standard_normal(a_shape)
        B = rng.standard_normal(b_shape) / np.sqrt(k)
        # planted probes: the last k weighs 8x (a dropped K tail shows); row 0 of A' scaled up
        if case.p["trans_a"]:
            A[-1, :] *= 8.0
            A[:, 0] *= 3.0
        else:
            A[:, -1] *= 8.0
            A[0, :] *= 3.0
        out = {"A": A, "B": B}
        c = _c_shape(case)
        if c is not None:
            out["C"] = rng.standard_normal(c)
        return {n: np.ascontiguousarray(v.astype(dtype.numpy)) for n, v in out.items()}

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        p = case.p
        packed = mm.pack_b(lib, inputs["B"], trans_b=bool(p["trans_b"]), threads=threads) \
            if p["b_form"] == "initializer" else None
        return mm.matmul(lib, inputs["A"], inputs["B"], outputs["Y"], trans_a=bool(p["trans_a"]),
                         trans_b=bool(p["trans_b"]), alpha=self.alpha(case), beta=self.beta(case), c=inputs.get("C"),
                         packed=packed, threads=threads, device=device)

    def oracle(self, case: Case, inputs: dict) -> dict:
        return {"Y": _gemm64(case, inputs)}

    def row_sizes(self, case: Case) -> dict:
        return {"Y": case.p["n"]}

    def flops(self, case: Case) -> float:
        p = case.p
        return 2.0 * p["m"] * p["n"] * p["k"]

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        p = case.p
        c = _c_shape(case)
        return float(p["m"] * p["k"] + p["k"] * p["n"] + p["m"] * p["n"] + (int(np.prod(c)) if c else 0)) * dtype.itemsize

    def compute_peak(self, case: Case, dtype: str) -> str:
        """bf16 multiplies bf16 pairs (vdpbf16ps, or bf16 converted to f32 FMA where the path has no
        bf16 dot: the bf16_dot probe measures the same loop on each path)."""
        return "bf16_dot" if dtype == "bf16" else "fma_f32"

    def bound_for(self, case: Case) -> str:
        return "memory" if case.p["m"] <= MEMORY_BOUND_MAX_M else "compute"

    node_types = (("", "Gemm"),)

    def from_node(self, node: NodeInfo) -> NodeBinding:
        """ai.onnx Gemm (opset 7+: C optional from 11): 2-D A and B, C broadcastable to (M, N) as a
        scalar, (N,), (1, N), (M, 1) or (M, N); B an initializer of the model maps to
        b_form=initializer (a runtime C is then bound per run, as the node's graph keeps only
        the model's constants constant)."""
        what = "Gemm"
        if node.opset < 7:
            raise NodeUnsupported(f"{what} (opset {node.opset}): the `broadcast` attribute of opsets before 7 is "
                                  "not mapped (ORT has no CPU kernel below 7 either)")
        ins = nh.node_inputs(node, what, 2, 3)
        if node.opset < 11 and (len(ins) < 3 or ins[2] is None):
            raise UsageError(f"{what} (opset {node.opset}) needs C before opset 11")
        nh.check_outputs(node, what)
        nh.check_attrs(node, what, ("alpha", "beta", "transA", "transB"))
        nh.same_float_inputs(node, what, [i for i in range(3) if i < len(ins) and ins[i] is not None])
        a, b = nh.node_shape(node, 0, what), nh.node_shape(node, 1, what)
        if len(a) != 2 or len(b) != 2:
            raise UsageError(f"{what}: A and B must be 2-D, got {a} and {b}")
        ta, tb = int(node.attr("transA", 0) != 0), int(node.attr("transB", 0) != 0)  # any nonzero transposes
        m, k = (a[1], a[0]) if ta else a
        kb, n = (b[1], b[0]) if tb else b
        if k != kb:
            raise UsageError(f"{what}: inner dimensions differ: A {a} (transA={ta}) and B {b} (transB={tb})")
        if 0 in (m, k, n):
            raise NodeUnsupported(f"{what} with an empty dimension (M={m}, K={k}, N={n}): nothing to compute")
        c_form = "none"
        if len(ins) > 2 and ins[2] is not None:
            cs = tuple(nh.node_shape(node, 2, what))
            # the first form that fits, in this order (where M or N is 1 several fit, all alike):
            # the node's C is reshaped to the case's (same element count)
            for form, fits in (("scalar", cs in ((), (1,), (1, 1))), ("row", cs in ((n,), (1, n))),
                               ("col", cs == (m, 1)), ("full", cs == (m, n))):
                if fits:
                    c_form = form
                    break
            else:
                raise UsageError(f"{what}: C of shape {cs} does not broadcast to (M, N) = ({m}, {n})")
        b_const = 1 in node.constants
        case = self.make_case({"m": m, "k": k, "n": n, "trans_a": ta, "trans_b": tb,
                               "alpha": el.float32_str(node.attr("alpha", 1.0)),
                               "beta": el.float32_str(node.attr("beta", 1.0)), "c": c_form,
                               "b_form": "initializer" if b_const else "input"}, "perfbench node")
        inputs = {"A": 0, "B": 1}
        if c_form != "none":
            inputs["C"] = 2
        return NodeBinding(case, inputs, {"Y": (0, (m, n))})
