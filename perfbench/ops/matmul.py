"""ai.onnx MatMul (opset 13): numpy's matmul, batch dims broadcast, 1-D operands promoted (A (K,)
to (1, K), B (K,) to (K, 1), the added dim dropped from Y). B is a runtime input or, as a model's
weight, a constant initializer (`b_form`): ORT prepacks that at session creation and we pack it
once outside the timed call (pb_matmul_pack_b), where B is one matrix; a batched constant B is
read as it lies on our side (whether ORT prepacks it is not checked here)."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi import matmul as mm
from perfbench.ops import _node_helpers as nh
from perfbench.ops._movement import parse_shape, prod, shape_str
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

B_FORMS = ("input", "initializer")
MAX_BATCH_RANK = 8
# rows of A up to which a cell is judged against bandwidth: a product does M / 2 flop per byte of an
# f32 B and M per byte of an f16/bf16 one, so M <= 4 stays at or below 2-4 flop per byte, under
# the FMA peak over DRAM bandwidth of the hosts measured (117 GFLOP/s over 29 GB/s = 4 at 1
# thread on the Zen 4); a per-cell roofline (min of both) is what the goals ask for and
# is not built yet
MEMORY_BOUND_MAX_M = 4


def _shapes(case: Case) -> tuple:
    p = case.p
    return parse_shape(p["a"], case.op, "a"), parse_shape(p["b"], case.op, "b")


def _mnk(case: Case) -> tuple:
    """(batch, m, n, k, A as 2+-D, B as 2+-D, Y shape)."""
    a, b = _shapes(case)
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    batch = np.broadcast_shapes(a2[:-2], b2[:-2])
    m, k, n = a2[-2], a2[-1], b2[-1]
    y = tuple(batch) + ((m,) if len(a) > 1 else ()) + ((n,) if len(b) > 1 else ())
    return tuple(batch), m, n, k, a2, b2, y


def _matmul64(case: Case, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    _, _, _, _, a2, b2, y = _mnk(case)
    return np.matmul(a.reshape(a2), b.reshape(b2)).reshape(y)


def _m_transposed_b(op, case, x):
    # B's memory read as (N, K) rows: a layout bug
    _, _, n, k, _, b2, _ = _mnk(case)
    b = np.swapaxes(x["B"].reshape(b2[:-2] + (n, k)), -1, -2)
    return {"Y": _matmul64(case, x["A"], b)}


def _m_k_tail(op, case, x):
    _, _, _, k, a2, b2, y = _mnk(case)
    cut = tail_len(k)
    a = x["A"].reshape(a2)[..., : k - cut]
    b = x["B"].reshape(b2)[..., : k - cut, :]
    return {"Y": np.matmul(a, b).reshape(y)}


def _m_batch_shift(op, case, x):
    y = _matmul64(case, x["A"], x["B"])
    return {"Y": np.roll(y, 1, axis=0)}


def _m_last_row(op, case, x):
    y = _matmul64(case, x["A"], x["B"]).copy()
    _, m, n, _, _, _, _ = _mnk(case)
    y.reshape(-1, m, n)[:, -1, :] = 0.0
    return {"Y": y}


@register
class MatMul(Op):
    name = "MatMul"
    kernel = "matmul"
    params = (
        Param("a", str, None, help="A's shape, dims joined by 'x' (e.g. 32x4096; 1-D allowed)"),
        Param("b", str, None, help="B's shape (e.g. 4096x11008; batch dims broadcast with A's)"),
        Param("b_form", str, "input", choices=B_FORMS,
              help="input: B bound per run; initializer: a model constant (prepacked by ORT, by us outside the call)"),
    )
    bound = "compute"
    # b or b_packed may be NULL (one of them is read; C refuses both NULL); c is Gemm's
    kernel_optional_args = ("b", "b_packed", "c")
    test_cases = (
        {"a": "3x33", "b": "33x5"},
        {"a": "3x33", "b": "33x5", "b_form": "initializer"},
        {"a": "1x37", "b": "37x17"},  # the M = 1 path
        {"a": "1x37", "b": "37x17", "b_form": "initializer"},
        {"a": "37", "b": "37x9"},  # 1-D A
        {"a": "2x5x21", "b": "21"},  # 1-D B, batched A
        {"a": "2x1x7x19", "b": "3x19x10"},  # batch broadcast
        {"a": "2x7x19", "b": "2x19x10", "b_form": "initializer"},  # batched B: read as it lies
        {"a": "64x200", "b": "200x96"},  # 2 threads split it
    )
    mutants = (
        Mutant("B read transposed", _m_transposed_b, lambda case: _mnk(case)[2] > 1 and _mnk(case)[3] > 1),
        Mutant("K tail dropped", _m_k_tail, lambda case: _mnk(case)[3] > 1),
        Mutant("batch index shifted", _m_batch_shift, lambda case: len(_mnk(case)[6]) > 2 and _mnk(case)[6][0] > 1),
        Mutant("last row of Y zeroed", _m_last_row, lambda case: _mnk(case)[1] > 1),
    )

    def validate(self, case: Case, where: str) -> None:
        a, b = _shapes(case)
        ka = a[-1]
        kb = b[0] if len(b) == 1 else b[-2]
        if ka != kb:
            raise UsageError(f"{where}: MatMul a={case.p['a']} and b={case.p['b']}: inner dimensions {ka} and {kb} differ")
        try:
            batch = np.broadcast_shapes(a[:-2], b[:-2])
        except ValueError:
            raise UsageError(f"{where}: MatMul batch dims of a={case.p['a']} and b={case.p['b']} do not broadcast") from None
        if len(batch) > MAX_BATCH_RANK:
            raise UsageError(f"{where}: MatMul with {len(batch)} batch dims: at most {MAX_BATCH_RANK}")

    def graph(self, case: Case) -> GraphSpec:
        a, b = _shapes(case)
        y = _mnk(case)[6]
        inits = ("B",) if case.p["b_form"] == "initializer" else ()
        return GraphSpec("MatMul", "", 13, [("A", "float", a), ("B", "float", b)], [("Y", y)], initializers=inits)

    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        a, b = _shapes(case)
        k = a[-1]
        A = rng.standard_normal(a)
        B = rng.standard_normal(b) / np.sqrt(k)  # Y ~ N(0, 1) whatever K
        # planted probes: the last k of every row of A weighs 8x (a dropped K tail shows), and
        # the first row of A is scaled up (rows mixed up show)
        A[..., -1] *= 8.0
        if len(a) > 1:
            A[..., 0, :] *= 3.0
        return {"A": np.ascontiguousarray(A.astype(dtype.numpy)), "B": np.ascontiguousarray(B.astype(dtype.numpy))}

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        _, _, _, _, a2, b2, _ = _mnk(case)
        A, B = inputs["A"].reshape(a2), inputs["B"].reshape(b2)
        Y = outputs["Y"].reshape(np.broadcast_shapes(a2[:-2], b2[:-2]) + (a2[-2], b2[-1]))
        packed = None
        if case.p["b_form"] == "initializer" and B.ndim == 2:
            packed = mm.pack_b(lib, B, threads=threads)  # once, outside the timed call, as ORT at session creation
        return mm.matmul(lib, A, B, Y, packed=packed, threads=threads, device=device)

    def oracle(self, case: Case, inputs: dict) -> dict:
        return {"Y": _matmul64(case, inputs["A"], inputs["B"])}

    def row_sizes(self, case: Case) -> dict:
        y = _mnk(case)[6]
        return {"Y": y[-1] if y else 1}

    def flops(self, case: Case) -> float:
        batch, m, n, k, _, _, _ = _mnk(case)
        return 2.0 * prod(batch) * m * n * k

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        a, b = _shapes(case)
        return float(prod(a) + prod(b) + prod(_mnk(case)[6])) * dtype.itemsize

    def compute_peak(self, case: Case, dtype: str) -> str:
        """bf16 multiplies bf16 pairs (vdpbf16ps, or bf16 converted to f32 FMA where the path has no
        bf16 dot: the bf16_dot probe measures the same loop on each path)."""
        return "bf16_dot" if dtype == "bf16" else "fma_f32"

    def bound_for(self, case: Case) -> str:
        return "memory" if _mnk(case)[1] <= MEMORY_BOUND_MAX_M else "compute"

    node_types = (("", "MatMul"),)

    def from_node(self, node: NodeInfo) -> NodeBinding:
        """ai.onnx MatMul (any opset): two float inputs of rank >= 1; B an initializer of the model
        maps to b_form=initializer (B given with --data stays an input)."""
        what = "MatMul"
        nh.node_inputs(node, what, 2, 2)
        nh.check_outputs(node, what)
        nh.same_float_inputs(node, what, (0, 1))
        a, b = nh.node_shape(node, 0, what), nh.node_shape(node, 1, what)
        if not a or not b:
            raise UsageError(f"{what}: a 0-d operand ({a} @ {b}) is not defined")
        if 0 in a or 0 in b:
            raise NodeUnsupported(f"{what} of an empty operand {a} @ {b}: nothing to compute")
        if len(a) > MAX_BATCH_RANK + 2 or len(b) > MAX_BATCH_RANK + 2:
            raise NodeUnsupported(f"{what} {a} @ {b}: more than {MAX_BATCH_RANK} batch dims")
        form = "initializer" if 1 in node.constants else "input"  # a model's weight, not --data
        case = self.make_case({"a": shape_str(a), "b": shape_str(b), "b_form": form}, "perfbench node")
        return NodeBinding(case, {"A": 0, "B": 1}, {"Y": (0, _mnk(case)[6])})
