"""`perfbench node`, stage 2: bind the node onto one of our ops (its from_node), the node seen
as an op of its own (NodeOp), and the inputs the user did not give (the op's own generator)."""

from __future__ import annotations

import math

import numpy as np

from perfbench import dtypes, ops
from perfbench.errors import UsageError
from perfbench.node.load import Problem, input_dtype, input_shape, np_dtype
from perfbench.ops.base import ELEM_TYPES, MAX_CASE_BYTES, GraphSpec, NodeBinding, NodeInfo, NodeUnsupported, Op

MAX_GENERATED_BYTES = MAX_CASE_BYTES  # the cap on one case (perfbench.ops.base)
SEED = 20261129


class OursCannot(Exception):
    """Our library cannot run the node (exit 3); the message is the one line saying why."""

def bind(prob: Problem, info: NodeInfo) -> tuple:
    """(op, binding) for the node; OursCannot when no op of ours can take it."""
    if info.dtype is None:
        raise OursCannot(f"{prob.node_label()}: the node has no floating-point input; our kernels take float32, "
                         "float16 or bfloat16")
    if info.dtype not in {d.name for d in dtypes.ALL}:
        raise OursCannot(f"{prob.node_label()}: element type {info.dtype}; our kernels take float32, float16 or "
                         "bfloat16")
    takers = [op for op in ops.REGISTRY.values() if (info.domain, info.op_type) in getattr(op, "node_types", ())]
    if not takers:
        same = sorted(op.name for op in ops.REGISTRY.values() if op.name == info.op_type)
        if same:  # the kernel exists; the mapping from a node onto its cases does not
            raise OursCannot(f"{prob.node_label()}: our {same[0]} kernel exists, but perfbench node cannot map a node "
                             "onto it yet (its op file has no from_node)")
        known = sorted({f"{d or 'ai.onnx'}::{t}" for op in ops.REGISTRY.values() for d, t in op.node_types})
        raise OursCannot(f"our library has no kernel for {prob.node_label()} (perfbench node maps: "
                         f"{', '.join(known) or 'nothing yet'})")
    reasons = []
    for op in takers:
        try:
            b = op.from_node(info)
        except NodeUnsupported as e:
            reasons.append(str(e))
            continue
        _check_binding(prob, info, op, b)
        return op, b
    raise OursCannot("; ".join(reasons))


def _check_binding(prob: Problem, info: NodeInfo, op: Op, b: NodeBinding) -> None:
    """A from_node result that does not fit the node is a bug in that op file: say so clearly."""
    graph = op.graph(b.case)
    declared = {n: tuple(s) for n, _, s in graph.inputs if n}
    for name, idx in b.inputs.items():
        if name not in declared or idx is None or idx >= len(info.inputs) or info.inputs[idx] is None:
            raise UsageError(f"{op.name}.from_node: input {name!r} -> node input {idx} does not exist (an op-file bug)")
        if math.prod(info.inputs[idx][1]) != math.prod(declared[name]):
            raise UsageError(f"{op.name}.from_node: node input {idx} has shape {info.inputs[idx][1]}, the op's "
                             f"{name!r} is {declared[name]}: element counts differ (an op-file bug)")
    types = {n: ty for n, ty, _ in graph.inputs if n}
    missing = sorted(n for n in set(declared) - set(b.inputs) if types[n] == "float")
    if missing:  # non-float op inputs the node lacks (ReduceMean-13's axes) come from the case itself
        raise UsageError(f"{op.name}.from_node: op inputs {', '.join(missing)} are not mapped (an op-file bug)")
    mapped = {idx for idx, _ in b.outputs.values()}
    wanted = [(j, n) for j, n in enumerate(prob.node.output) if n and n in {g for g, _, _ in prob.graph_outputs}]
    unmapped = [n for j, n in wanted if j not in mapped]
    if unmapped:
        raise OursCannot(f"{prob.node_label()}: the model asks for output(s) {', '.join(unmapped)}, which our "
                         f"{op.name} kernel does not produce")
    shapes = op.output_shapes(b.case)
    for name, (idx, shape) in b.outputs.items():
        if name not in shapes or math.prod(shape) != math.prod(shapes[name]):
            raise UsageError(f"{op.name}.from_node: output {name!r} -> node output {idx} {shape} does not fit "
                             "the op's output (an op-file bug)")


# ---------------------------------------------------------- the node as an op of its own ----
class NodeOp(Op):
    """The user's node seen through the harness's Op interface: inputs i0.., outputs o0.. in
    node order, the ORT graph is the user's node itself (attributes exactly as given), and our
    kernel is the mapped op run on views of the same buffers."""

    def __init__(self, prob: Problem, info: NodeInfo, op: Op, binding: NodeBinding):
        self.prob, self.info, self.base, self.binding = prob, info, op, binding
        self.name = f"node:{op.name}"
        self.floors = op.floors
        self.bound = op.bound_for(binding.case)
        self._out_shape = {}
        for idx, shape in binding.outputs.values():
            self._out_shape[idx] = tuple(shape)
        self._base_graph = op.graph(binding.case)
        self._base_in_shape = {n: tuple(s) for n, _, s in self._base_graph.inputs if n}
        self._base_out_shape = op.output_shapes(binding.case)
        # op inputs the node does not have (constants of the case, e.g. ReduceMean-13's axes as an
        # input of the op's own graph): the op's generator makes them from the case
        unmapped = [n for n in self._base_in_shape if n not in binding.inputs]
        made = op.make_inputs(binding.case, dtypes.get(info.dtype), np.random.default_rng(SEED)) if unmapped else {}
        self._extras = {n: made[n] for n in unmapped}

    def _type(self, dt: np.dtype) -> str:
        if dt == dtypes.get(self.info.dtype).numpy:
            return "float"
        for k, v in ELEM_TYPES.items():
            if v == dt:
                return k
        raise OursCannot(f"{self.prob.node_label()}: an input of element type {dt} (perfbench binds float, int64, "
                         "int32, bool and uint8 inputs)")

    def graph(self, case=None) -> GraphSpec:
        ins = [(f"i{k}" if spec else "", self._type(spec[0]) if spec else "float", spec[1] if spec else ())
               for k, spec in enumerate(self.info.inputs)]
        outs = []
        for j, name in enumerate(self.info.outputs):
            if name and j in self._out_shape:
                code = next((c for n, c, _ in self.prob.graph_outputs if n == name), None)
                t = self._type(np_dtype(code, self.prob.where)) if code else "float"
                outs.append((f"o{j}", self._out_shape[j], t))
            else:
                outs.append(("", ()))
        imports = tuple((o.domain if o.domain != "ai.onnx" else "", o.version) for o in self.prob.model.opset_import)
        # a model's weight stays a constant of ORT's graph (ORT prepacks a MatMul weight) where the
        # op's own graph declares that input an initializer; every other initializer of the model
        # (an embedding table, a cos/sin cache, axes) is bound as before: as constants, each of K
        # copies would hold its own (a 256 MiB table x 64), and ORT could fold a node of constants
        mine = {idx for name, idx in self.binding.inputs.items() if name in self._base_graph.initializers}
        consts = tuple(f"i{k}" for k in sorted(self.info.constants & mine) if self.info.inputs[k] is not None)
        return GraphSpec(self.info.op_type, self.info.domain, self.info.opset, ins, outs,
                         opset_imports=imports, node_proto=self.prob.node, initializers=consts)

    def output_shapes(self, case=None) -> dict:
        return {f"o{j}": s for j, s in self._out_shape.items()}

    def row_sizes(self, case=None) -> dict:
        rows = self.base.row_sizes(self.binding.case)
        return {f"o{idx}": rows[name] for name, (idx, _) in self.binding.outputs.items()}

    def bytes_moved(self, case, dtype) -> float:
        return self.base.bytes_moved(self.binding.case, dtype)

    def flops(self, case=None) -> float:
        return self.base.flops(self.binding.case)

    def op_inputs(self, inputs: dict) -> dict:
        graph_types = {n: t for n, t, _ in self._base_graph.inputs if n}
        out = {}
        for name, idx in self.binding.inputs.items():
            a = inputs[f"i{idx}"]
            t = graph_types[name]
            if t != "float" and a.dtype != ELEM_TYPES[t]:
                a = a.astype(ELEM_TYPES[t])  # e.g. int32 indices for an op that takes int64
            out[name] = a.reshape(self._base_in_shape[name])
        out.update({n: a.copy() for n, a in self._extras.items()})
        return out

    def prepare_ours(self, lib, case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        mine = self.op_inputs(inputs)
        dt = dtypes.get(self.info.dtype)
        types = self.base.output_dtypes(self.binding.case, dt.numpy)
        outs = {}
        for name, shape in self._base_out_shape.items():
            if name in self.binding.outputs:
                idx = self.binding.outputs[name][0]
                buf = outputs[f"o{idx}"]
                view = buf.reshape(shape)
                if not np.shares_memory(view, buf):
                    raise UsageError(f"output o{idx} cannot be viewed as {shape} without a copy")
                outs[name] = view
            else:
                outs[name] = np.empty(shape, types[name])
        al = self.base.aliases(self.binding.case)
        for o, i in al.items():  # an output that IS an input buffer: the op writes into that input
            outs[o] = mine[i]
        return self.base.prepare_ours(lib, self.binding.case, mine, outs, threads, device=device)


def generate_inputs(prob: Problem, op: Op, binding: NodeBinding, info: NodeInfo, seed: int) -> None:
    """Inputs the user did not give: the op's own seeded generator (its planted probes
    included), reshaped to the node's shapes."""
    missing = [n for n, _, _ in prob.graph_inputs if n not in prob.arrays]
    if not missing:
        return
    total = sum(math.prod(input_shape(prob, n)) * input_dtype(prob, n).itemsize for n in missing)
    if total > MAX_GENERATED_BYTES:
        raise UsageError(f"the generated inputs would take {total / 2**30:.1f} GiB (more than "
                         f"{MAX_GENERATED_BYTES / 2**30:.0f} GiB): smaller --dim values, or give the inputs with --data")
    dt = dtypes.get(info.dtype)
    made = op.make_inputs(binding.case, dt, np.random.default_rng(seed))
    by_index = {idx: name for name, idx in binding.inputs.items()}
    for k, name in enumerate(prob.node.input):
        if name not in missing:
            continue
        if k not in by_index:
            raise UsageError(f"{prob.where}: input {name!r} steers the computation and perfbench cannot invent it: "
                             "give it as an initializer or with --data DIR")
        arr = made[by_index[k]]
        want = input_dtype(prob, name)
        if arr.dtype != want:
            arr = arr.astype(want)
        prob.arrays[name] = np.asarray(arr.reshape(input_shape(prob, name)), order="C")
        prob.generated.append(name)
    for n in missing:
        if n not in prob.arrays:  # a graph input the node does not read: zeros of its declared shape
            prob.arrays[n] = np.zeros(input_shape(prob, n), input_dtype(prob, n))
            prob.generated.append(n)
