"""The one runner of ONNX's own reference implementation (onnx.reference.ReferenceEvaluator) for
the op files' float64 oracles: one node in a one-node model, every float input (float32, float16,
bfloat16, float64) fed as float64, integer and bool inputs as they are (CONTRACTS §8: evaluated
in float16 it rejects correct kernels). numpy's overflow / invalid / divide warnings are silenced:
softmax and attention oracles meet -inf masks and huge scores on purpose."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.ops.base import GraphSpec

_FLOATS = {np.dtype(d.numpy) for d in dtypes.ALL}


def as_f64(a) -> np.ndarray:
    """A float array (of any of our dtypes) as float64; anything else unchanged."""
    a = np.asarray(a)
    return a.astype(np.float64) if a.dtype.kind == "f" or a.dtype in _FLOATS else a


def evaluate(op_type: str, inputs: list, outputs: int | list = 1, *, opset: int, domain: str = "",
             **attrs) -> list:
    """onnx.reference on one node. `inputs` in the node's order (None: an absent optional input);
    `outputs` a count or the node's output names ("" = an absent optional output). Returns the
    present outputs in order, as onnx.reference gives them."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    names, vinfo, feeds = [], [], {}
    for i, a in enumerate(inputs):
        if a is None:
            names.append("")
            continue
        a = as_f64(a)
        n = f"in{i}"
        names.append(n)
        vinfo.append(helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)))
        feeds[n] = a
    outs = [f"out{j}" for j in range(outputs)] if isinstance(outputs, int) else list(outputs)
    node = helper.make_node(op_type, names, outs, domain=domain or None, **attrs)
    graph = helper.make_graph([node], op_type.lower(), vinfo,
                              [helper.make_tensor_value_info(o, TensorProto.DOUBLE, None) for o in outs if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return ReferenceEvaluator(model).run(None, feeds)


def evaluate_spec(spec: GraphSpec, inputs: dict) -> dict:
    """onnx.reference on `spec`'s node (the op's own single-node graph) with the named inputs;
    returns its present outputs by name, as float64."""
    ins = [inputs[n] if n else None for n, _, _ in spec.inputs]
    outs = [o[0] for o in spec.outputs]
    got = evaluate(spec.op_type, ins, outs, opset=spec.opset, domain=spec.domain, **spec.attrs)
    return {name: np.asarray(v, dtype=np.float64) for name, v in zip([o for o in outs if o], got)}
