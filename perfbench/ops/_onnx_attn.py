"""Shared pieces of the ai.onnx Attention and RotaryEmbedding op files (opset 23): their float64
oracle is ONNX's own reference implementation (onnx.reference.ReferenceEvaluator) run on the
op's single-node graph with every float input and output in float64 (CONTRACTS §8: evaluated in
float16 it rejects correct kernels)."""

from __future__ import annotations

import numpy as np

from perfbench.ops.base import GraphSpec

_ELEM = {"int64": "INT64", "int32": "INT32", "bool": "BOOL", "f32": "FLOAT"}


def reference_run(spec: GraphSpec, inputs: dict) -> dict:
    """onnx.reference on `spec`'s node with "float" inputs and outputs as float64; returns the
    outputs by name."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    def elem(t):
        return TensorProto.DOUBLE if t == "float" else getattr(TensorProto, _ELEM[t])

    names = [n for n, _, _ in spec.inputs if n]
    g_in = [helper.make_tensor_value_info(n, elem(t), list(shape)) for n, t, shape in spec.inputs if n]
    outs = [o[0] for o in spec.outputs]
    g_out = [helper.make_tensor_value_info(o[0], elem(spec.output_type(o[0])), list(o[1])) for o in spec.outputs
             if o[0]]
    node = helper.make_node(spec.op_type, [n for n, _, _ in spec.inputs], outs, domain=spec.domain or None,
                            **spec.attrs)
    model = helper.make_model(helper.make_graph([node], spec.op_type, g_in, g_out),
                              opset_imports=[helper.make_opsetid(spec.domain, spec.opset)])
    feeds = {n: (inputs[n].astype(np.float64) if inputs[n].dtype.kind == "f" else inputs[n]) for n in names}
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        got = ReferenceEvaluator(model).run(None, feeds)
    return {name: np.asarray(v, dtype=np.float64) for name, v in zip([o for o in outs if o], got)}


def float_param(value: str, what: str, where: str) -> float:
    """A float attribute carried as a string parameter (case ids stay exact: '2', '0.125')."""
    from perfbench.errors import UsageError

    try:
        v = float(value)
    except ValueError:
        raise UsageError(f"{where}: {what}={value!r} is not a number") from None
    if not np.isfinite(v):
        raise UsageError(f"{where}: {what}={value!r} must be finite")
    return v


def float_text(v: float) -> str:
    """The parameter string of a float attribute: repr without a trailing '.0' ('2', '0.125')."""
    text = repr(float(v))
    return text[:-2] if text.endswith(".0") else text
