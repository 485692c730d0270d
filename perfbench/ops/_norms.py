"""The LayerNormalization family (suites/norms.toml), shared by its five op files.

Every op normalizes rows of `hidden` elements, computing in float32 (ORT's CPU kernels do too):

    v = x (+ skip) (+ bias)                              Skip* ops only: skip and bias
    y = (v - mean) / sqrt(var + epsilon) * scale (+ beta)  LayerNormalization, SkipLayerNormalization
    y = v / sqrt(mean(v^2) + epsilon) * scale              Simplified*, RMSNormalization

with the population variance. Optional outputs: mean and inv_std (float32 for every input type,
one per row), and for the Skip* ops input_skip_bias_sum (v in the cell's dtype). What ORT 1.31
actually returns, checked against real sessions (tests/ops/test_norms.py):
- LayerNormalization, SkipLayerNormalization: mean and inv_std are filled;
- SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization: inv_std is the RMS's inverse;
  SkipSimplifiedLayerNormalization writes zeros into `mean` (a simplified norm has no mean):
  our op never asks for it, and from_node declines a node that does;
- f32, f16 and bf16 kernels for all but RMSNormalization (opset 23), whose bf16 graph fails to
  load (its function body needs a bf16 Mul): bf16 cells compare with ORT in f32 there.

One native kernel (`layer_norm`) serves all five. Inputs carry planted probes: the last row is
offset by +4 (a kernel that forgets the mean, or subtracts it in an RMS norm, is far off there)
and, where the op allows it, the first row has a variance of ~1e-6 (so epsilon = 1e-5
dominates: ignoring it shows); hidden sizes with tails (903, 37) are numerics-only shapes.
"""

from __future__ import annotations

import math

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi import norms as ffi_norms
from perfbench.ops import _node_helpers as nh
from perfbench.ops.base import Case, GraphSpec, Mutant, NodeBinding, NodeInfo, NodeUnsupported, Op, Param, tail_len

OFFSET_ROW = 4.0  # added to the last row of x: its mean is far from 0
QUIET_STD = 1e-3  # std of the first row (and its skip row): variance << epsilon


def eps_text(value: float) -> str:
    """The case-id spelling of an epsilon: the shortest text that round-trips its float32."""
    return str(np.float32(value))


def eps_value(case: Case) -> float:
    return float(np.float32(case.p["eps"]))


def check_eps(case: Case, where: str) -> None:
    text = case.p["eps"]
    try:
        v = float(text)
    except ValueError:
        raise UsageError(f"{where}: eps={text!r} is not a number (write e.g. eps = \"1e-05\")") from None
    if not math.isfinite(v) or v < 0 or abs(v) > float(np.finfo(np.float32).max):
        raise UsageError(f"{where}: eps={text!r} must be a finite float32 >= 0")
    if eps_text(v) != text:
        raise UsageError(f"{where}: write eps={text!r} as {eps_text(v)!r} (one spelling per value keeps case ids stable)")


def reference64(v: np.ndarray, scale, beta, eps: float, simplified: bool, *, drop_tail: int = 0,
                ignore_eps: bool = False, mean_mode: str = "op") -> dict:
    """float64 normalization of the rows of v (rows, hidden). The keywords switch one bug on
    (mutants): drop_tail (statistics without the last elements, which are written as 0),
    ignore_eps, mean_mode "none" (never subtract the mean) or "always" (always subtract it)."""
    rows, n = v.shape
    keep = n - drop_tail
    vs = v[:, :keep]
    subtract = (not simplified) if mean_mode == "op" else (mean_mode == "always")
    e = 0.0 if ignore_eps else eps
    mean = vs.mean(axis=1, keepdims=True)
    if subtract:
        var = ((vs - mean) ** 2).mean(axis=1, keepdims=True)
        centered = v - mean
    else:
        var = (vs ** 2).mean(axis=1, keepdims=True)
        centered = v
    with np.errstate(divide="ignore"):
        inv = 1.0 / np.sqrt(var + e)
    y = centered * inv * scale
    if beta is not None:
        y = y + beta
    if drop_tail:
        y[:, keep:] = 0.0
    return {"y": y, "mean": mean, "inv_std": inv}


class NormOp(Op):
    """The shared body of the five ops; each op file sets the class attributes."""
    # pb_layer_norm_args: NULL = none / not asked for (skip is refused while skip_rows says it is there)
    kernel_optional_args = ("bias", "beta", "mean", "inv_std", "sum")

    kernel = "layer_norm"
    bound = "memory"
    ort_substitute: dict = {}  # ORT has f32, f16 and bf16 kernels: bf16 is head to head
    op_type = ""
    domain = ""
    opset = 1
    simplified = False
    skip_op = False  # SkipLayerNormalization / SkipSimplifiedLayerNormalization
    default_eps = "1e-05"
    # the node's input and output slots in order (x, skip, scale, beta, bias; y, mean, inv_std,
    # sum; None: a slot this op never uses) and their ONNX names
    in_slots: tuple = ()
    out_slots: tuple = ()
    in_names: dict = {}
    out_names: dict = {}

    # ---- parameters ----
    @classmethod
    def make_params(cls, *, beta: bool, stats: bool, skip: bool, bias_default: int = 1, sum_default: int = 0):
        ps = [Param("rows", int, None, minimum=1, help="rows normalized (tokens: batch x sequence)"),
              Param("hidden", int, None, minimum=1, help="elements per row (hidden size)")]
        if skip:
            ps.append(Param("skip_rows", int, 0, minimum=0,
                            help="rows of skip (0 = rows; fewer: one batch row of skip broadcast over the batch)"))
            ps.append(Param("bias", int, bias_default, choices=(0, 1), help="bias input added to input + skip"))
        if beta:
            ps.append(Param("beta", int, 1, choices=(0, 1), help="beta (B) input added after scaling"))
        if stats:
            ps.append(Param("stats", int, 0, choices=(0, 1), help="ask for the float32 statistics outputs"))
        if skip:
            ps.append(Param("sum", int, sum_default, choices=(0, 1), help="ask for input_skip_bias_sum"))
        ps.append(Param("eps", str, cls.default_eps, help="epsilon, spelled as the shortest float32 text"))
        return tuple(ps)

    def validate(self, case: Case, where: str) -> None:
        check_eps(case, where)
        p = case.p
        if self.skip_op and p["skip_rows"] and p["rows"] % p["skip_rows"]:
            raise UsageError(f"{where}: skip_rows={p['skip_rows']} must divide rows={p['rows']}")

    def _flag(self, case: Case, name: str) -> bool:
        return bool(case.p.get(name, 0))

    def skip_rows(self, case: Case) -> int:
        return (case.p["skip_rows"] or case.p["rows"]) if self.skip_op else 0

    def has(self, case: Case, what: str) -> bool:
        """Whether this case has optional input beta/bias or asks for output mean/inv_std/sum."""
        if what in ("beta", "bias"):
            return what in self.in_slots and bool(case.p.get(what, 0))
        if what == "sum":
            return what in self.out_slots and bool(case.p.get("sum", 0))
        if what in ("mean", "inv_std"):
            return what in self.out_slots and bool(case.p.get("stats", 0))
        raise KeyError(what)

    # ---- shapes ----
    def x_shape(self, case: Case) -> tuple:
        p = case.p
        sr = self.skip_rows(case)
        if self.skip_op and sr != p["rows"]:
            return (p["rows"] // sr, sr, p["hidden"])
        return (p["rows"], p["hidden"])

    def stats_shape(self, case: Case) -> tuple:
        return self.x_shape(case)[:-1] + (1,)

    def graph(self, case: Case) -> GraphSpec:
        h = case.p["hidden"]
        xs = self.x_shape(case)
        shapes = {"x": xs, "skip": (self.skip_rows(case), h), "scale": (h,), "beta": (h,), "bias": (h,)}
        ins = [(self.in_names[k] if k in ("x", "skip", "scale") or self.has(case, k) else "", "float", shapes[k])
               for k in self.in_slots]
        outs = []
        for k in self.out_slots:
            name = self.out_names.get(k) if k == "y" or (k is not None and self.has(case, k)) else None
            if k in ("mean", "inv_std"):
                outs.append((name or "", self.stats_shape(case), "f32"))
            else:
                outs.append((name or "", xs))
        for lst in (ins, outs):  # absent optional inputs/outputs at the end are left off the node
            while not lst[-1][0]:
                lst.pop()
        attrs = {"epsilon": eps_value(case)}
        if not self.skip_op:
            attrs["axis"] = -1
        return GraphSpec(self.op_type, self.domain, self.opset, ins, outs, attrs, self.opset_imports)

    opset_imports: tuple = ()

    # ---- inputs ----
    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        p = case.p
        rows, h = p["rows"], p["hidden"]
        n = self.in_names
        x = rng.standard_normal((rows, h))
        skip = rng.standard_normal((self.skip_rows(case), h)) if self.skip_op else None
        bias = 0.5 * rng.standard_normal(h) if self.skip_op and self.has(case, "bias") else None
        quiet = rows > 1 and bias is None
        if quiet:
            # first row: variance ~1e-6, so that epsilon (1e-5) dominates
            x[0] *= QUIET_STD
            if skip is not None:
                skip[0] *= QUIET_STD
                if skip.shape[0] < rows:
                    skip[0] = 0.0  # the skip row also feeds other batch rows: keep it exact
        x[-1] += OFFSET_ROW  # last row: its mean is far from 0
        out = {n["x"]: x.reshape(self.x_shape(case))}
        if skip is not None:
            out[n["skip"]] = skip
        out[n["scale"]] = 1.0 + 0.5 * rng.standard_normal(h)
        if self.has(case, "beta"):
            out[n["beta"]] = 0.5 * rng.standard_normal(h)
        if bias is not None:
            out[n["bias"]] = bias
        return {k: np.ascontiguousarray(v.astype(dtype.numpy)) for k, v in out.items()}

    # ---- ours ----
    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        p = case.p
        n, o = self.in_names, self.out_names
        rows, h = p["rows"], p["hidden"]

        def opt_in(what):
            return inputs[n[what]] if self.has(case, what) else None

        def opt_out(what, shape):  # a view of the graph's output with the kernel's shape
            return outputs[o[what]].reshape(shape) if self.has(case, what) else None

        return ffi_norms.layer_norm(
            lib, inputs[n["x"]].reshape(rows, h), inputs[n["scale"]], outputs[o["y"]].reshape(rows, h),
            epsilon=eps_value(case), simplified=self.simplified,
            skip=inputs[n["skip"]] if self.skip_op else None, bias=opt_in("bias"), beta=opt_in("beta"),
            mean=opt_out("mean", (rows,)), inv_std=opt_out("inv_std", (rows,)), sum_out=opt_out("sum", (rows, h)),
            threads=threads, device=device)

    # ---- truth ----
    def combined64(self, case: Case, x: dict, *, bias: bool = True, skip_blocks: bool = False) -> np.ndarray:
        """v = x (+ skip) (+ bias) as float64 (rows, hidden); bias=False leaves the bias out and
        skip_blocks repeats each skip row over consecutive rows instead of tiling it (mutants)."""
        p = case.p
        n = self.in_names
        rows, h = p["rows"], p["hidden"]
        v = x[n["x"]].reshape(rows, h).astype(np.float64)
        if self.skip_op:
            sk = x[n["skip"]].astype(np.float64)
            reps = rows // sk.shape[0]
            v = v + (np.repeat(sk, reps, axis=0) if skip_blocks else np.tile(sk, (reps, 1)))
            if bias and self.has(case, "bias"):
                v = v + x[n["bias"]].astype(np.float64)
        return v

    def outputs64(self, case: Case, x: dict, v: np.ndarray | None = None, sum_v: np.ndarray | None = None,
                  **bugs) -> dict:
        """All outputs this case asks for, float64, with the graph's shapes."""
        n, o = self.in_names, self.out_names
        v = self.combined64(case, x) if v is None else v
        beta = x[n["beta"]].astype(np.float64) if self.has(case, "beta") else None
        r = reference64(v, x[n["scale"]].astype(np.float64), beta, eps_value(case), self.simplified, **bugs)
        xs, ss = self.x_shape(case), self.stats_shape(case)
        out = {o["y"]: r["y"].reshape(xs)}
        for what in ("mean", "inv_std"):
            if self.has(case, what):
                out[o[what]] = r[what].reshape(ss)
        if self.has(case, "sum"):
            out[o["sum"]] = (v if sum_v is None else sum_v).reshape(xs)
        return out

    def oracle(self, case: Case, inputs: dict) -> dict:
        return self.outputs64(case, inputs)

    def row_sizes(self, case: Case) -> dict:
        """y and sum: one row; the statistics: the whole (rows,) tensor (a row's mean can be ~0:
        its own magnitude is no yardstick)."""
        out = {self.out_names["y"]: case.p["hidden"]}
        for what in ("mean", "inv_std", "sum"):
            if self.has(case, what):
                out[self.out_names[what]] = case.p["hidden"] if what == "sum" else case.p["rows"]
        return out

    # ---- costs ----
    def flops(self, case: Case) -> float:
        p = case.p
        adds = (1 + self.has(case, "bias")) if self.skip_op else 0
        per = (3 if self.simplified else 5) + 3 + adds  # statistics + normalize/scale/shift
        return float(per * p["rows"] * p["hidden"])

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        p = case.p
        rows, h, es = p["rows"], p["hidden"], dtype.itemsize
        elems = rows * h + h  # x, scale
        if self.skip_op:
            elems += self.skip_rows(case) * h
        elems += h * (self.has(case, "beta") + self.has(case, "bias"))
        elems += rows * h  # y
        if self.has(case, "sum"):
            elems += rows * h
        stats = sum(4 * rows for what in ("mean", "inv_std") if self.has(case, what))
        return float(elems * es + stats)

    # ---- mutants ----
    @classmethod
    def standard_mutants(cls) -> tuple:
        return (
            Mutant("epsilon ignored", _m_eps, lambda case: case.p["rows"] > 1 and not case.p.get("bias", 0)),
            Mutant("tail elements ignored", _m_tail, lambda case: case.p["hidden"] > 1),
            Mutant("a row zeroed", _m_zero_row),
        )

    # ---- `perfbench node` ----
    min_opset = 0

    def from_node(self, node: NodeInfo) -> NodeBinding:
        if (node.domain, node.op_type) not in self.node_types:
            raise NodeUnsupported(f"{node.domain or 'ai.onnx'}::{node.op_type} is not {self.name}")
        if self.skip_op:
            return from_skip_node(self, node)
        return from_axis_node(self, node, min_opset=self.min_opset)


def _m_eps(op, case, x):
    return op.outputs64(case, x, ignore_eps=True)


def _m_tail(op, case, x):
    return op.outputs64(case, x, drop_tail=tail_len(case.p["hidden"]))


def _m_zero_row(op, case, x):
    out = op.outputs64(case, x)
    y = out[op.out_names["y"]]
    y.reshape(-1, case.p["hidden"])[-1] = 0.0
    return out


def m_mean_ignored(op, case, x):
    return op.outputs64(case, x, mean_mode="none")


def m_mean_subtracted(op, case, x):
    return op.outputs64(case, x, mean_mode="always")


def m_inv_std_is_std(op, case, x):
    out = op.outputs64(case, x)
    name = op.out_names["inv_std"]
    out[name] = 1.0 / out[name]
    return out


def m_bias_ignored(op, case, x):
    return op.outputs64(case, x, v=op.combined64(case, x, bias=False))


def m_sum_without_bias(op, case, x):
    return op.outputs64(case, x, sum_v=op.combined64(case, x, bias=False))


def m_skip_blocks(op, case, x):
    v = op.combined64(case, x, skip_blocks=True)
    return op.outputs64(case, x, v=v)


# ---- `perfbench node` helpers ----

def node_eps(node: NodeInfo, default: float) -> str:
    eps = node.attr("epsilon", default)
    if not isinstance(eps, (int, float)) or not math.isfinite(float(np.float32(eps))) or eps < 0:
        raise NodeUnsupported(f"{node.op_type}: epsilon={eps!r} is not implemented (a finite value >= 0 is)")
    return eps_text(eps)


def from_axis_node(op: NormOp, node: NodeInfo, *, min_opset: int = 0) -> NodeBinding:
    """LayerNormalization, SimplifiedLayerNormalization, RMSNormalization: X flattened at `axis`
    into (rows = prod(shape[:axis]), hidden = prod(shape[axis:]))."""
    name = node.op_type
    if node.opset < min_opset:
        raise UsageError(f"{name}: needs opset >= {min_opset} of the default domain, the model imports {node.opset}")
    ins = nh.node_inputs(node, name, 2, len(op.in_slots))
    nh.check_outputs(node, name, len(op.out_slots))
    nh.check_attrs(node, name, ("axis", "epsilon", "stash_type"))
    nh.node_float_dtype(node, name)
    stash = node.attr("stash_type", 1)
    if stash != 1:
        raise NodeUnsupported(f"{name}: stash_type={stash} is not implemented (only 1: float32 statistics)")
    xshape = tuple(node.inputs[0][1])
    rank = len(xshape)
    if rank == 0:
        raise UsageError(f"{name}: X must have at least one dimension")
    axis = node.attr("axis", -1)
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < rank:
        raise UsageError(f"{name}: axis={axis} is outside [-{rank}, {rank}) for X of shape {xshape}")
    rows, hidden = math.prod(xshape[:a]), math.prod(xshape[a:])
    if rows == 0 or hidden == 0:
        raise NodeUnsupported(f"{name}: an empty X {xshape} is not implemented")
    for i in range(1, len(ins)):
        if ins[i] is None:
            continue
        what = op.in_names[op.in_slots[i]]
        nh.same_float_inputs(node, name, (i,), NodeUnsupported)
        shape = tuple(ins[i][1])
        want = tuple(xshape[a:])
        try:
            np.broadcast_shapes(shape, want)
            fits = len(shape) <= len(want) or all(d == 1 for d in shape[:len(shape) - len(want)])
        except ValueError:
            fits = False
        if not fits:
            raise UsageError(f"{name}: {what} of shape {shape} does not broadcast to X.shape[axis:] = {want}")
        if math.prod(shape) != hidden:
            raise NodeUnsupported(f"{name}: {what} of shape {shape} broadcast over X.shape[axis:] = {want} "
                                  f"is not implemented ({what} must hold all {hidden} elements)")
    params = {"rows": rows, "hidden": hidden, "eps": node_eps(node, 1e-5)}
    if "beta" in op.in_slots:
        params["beta"] = int(len(node.inputs) > 2 and node.inputs[2] is not None)
    stats_slots = [i for i, k in enumerate(op.out_slots) if k in ("mean", "inv_std")]
    if stats_slots:
        params["stats"] = int(any(nh.wanted(node, i) for i in stats_slots))
    case = op.make_case(params, f"{name} node")
    inputs = {op.in_names[k]: i for i, k in enumerate(op.in_slots) if i < len(node.inputs) and node.inputs[i] is not None}
    stats_shape = xshape[:a] + (1,) * (rank - a)
    outputs = {op.out_names["y"]: (0, xshape)}
    outputs.update({op.out_names[op.out_slots[i]]: (i, stats_shape) for i in stats_slots if nh.wanted(node, i)})
    return NodeBinding(case, inputs, outputs)


def from_skip_node(op: NormOp, node: NodeInfo) -> NodeBinding:
    """SkipLayerNormalization, SkipSimplifiedLayerNormalization (com.microsoft): input (B, S, H)
    or (T, H); skip of the input's shape, or (S, H) / (k, S, H) repeated over the batch."""
    name = node.op_type
    ins = nh.node_inputs(node, name, 3, len(op.in_slots))
    nh.check_outputs(node, name, len(op.out_slots))
    nh.check_attrs(node, name, ("epsilon",))
    nh.node_float_dtype(node, name)
    xshape = tuple(node.inputs[0][1])
    if len(xshape) not in (2, 3):
        raise UsageError(f"{name}: input must be 3-D (batch, sequence, hidden) or 2-D (tokens, hidden), got {xshape}")
    hidden, rows = xshape[-1], math.prod(xshape[:-1])
    if rows == 0 or hidden == 0:
        raise NodeUnsupported(f"{name}: an empty input {xshape} is not implemented")
    nh.same_float_inputs(node, name, (1,), NodeUnsupported)
    sk = tuple(ins[1][1])
    if sk == xshape:
        skip_rows = 0
    elif len(xshape) == 3 and len(sk) == 2 and sk == xshape[1:]:
        skip_rows = xshape[1]
    elif len(xshape) == 3 and len(sk) == 3 and sk[1:] == xshape[1:] and sk[0] >= 1:
        if xshape[0] % sk[0]:
            raise NodeUnsupported(f"{name}: skip {sk} repeated over a batch of {xshape[0]} (not a multiple of "
                                  f"{sk[0]}) is not implemented")
        skip_rows = sk[0] * xshape[1]
    else:
        raise UsageError(f"{name}: skip of shape {sk} does not fit input {xshape} (the input's shape, or "
                         f"(S, H) / (1, S, H) for a 3-D input)")
    for i in range(2, len(ins)):
        if ins[i] is None:
            continue
        what = op.in_names[op.in_slots[i]]
        nh.same_float_inputs(node, name, (i,), NodeUnsupported)
        if tuple(ins[i][1]) != (hidden,):
            raise UsageError(f"{name}: {what} must be 1-D of the hidden size {hidden}, got {node.inputs[i][1]}")
    for i, k in enumerate(op.out_slots):
        if k is None and nh.wanted(node, i):
            raise NodeUnsupported(f"{name}: output {i} ({node.outputs[i]!r}, 'mean') is not implemented: a "
                                  f"simplified norm has no mean (ORT writes zeros there)")
    present = {k for i, k in enumerate(op.in_slots) if i < len(node.inputs) and node.inputs[i] is not None}
    params = {"rows": rows, "hidden": hidden, "skip_rows": skip_rows, "bias": int("bias" in present)}
    if "beta" in op.in_slots:
        params["beta"] = int("beta" in present)
    stats_slots = [i for i, k in enumerate(op.out_slots) if k in ("mean", "inv_std")]
    params["stats"] = int(any(nh.wanted(node, i) for i in stats_slots))
    params["sum"] = int(nh.wanted(node, op.out_slots.index("sum")))
    params["eps"] = node_eps(node, 1e-12)
    case = op.make_case(params, f"{name} node")
    inputs = {op.in_names[k]: i for i, k in enumerate(op.in_slots) if k in present}
    outputs = {}
    for i, k in enumerate(op.out_slots):
        if k is not None and nh.wanted(node, i):
            outputs[op.out_names[k]] = (i, xshape[:-1] + (1,) if k in ("mean", "inv_std") else xshape)
    return NodeBinding(case, inputs, outputs)

