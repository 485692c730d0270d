"""ORT side of a case: single-node ONNX models (K copies for the differential estimate),
sessions with the cell's threads and spin policy, IOBinding onto our numpy buffers, and which
path ORT actually took (from its profile)."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from perfbench import dtypes
from perfbench.ops.base import ELEM_TYPES, GraphSpec

# onnx 1.23 writes IR version 14, ORT 1.31 reads at most 13; 11 covers opset 23.
IR_VERSION = 11

_ELEM = {"f32": TensorProto.FLOAT, "int64": TensorProto.INT64, "int32": TensorProto.INT32, "bool": TensorProto.BOOL,
         "uint8": TensorProto.UINT8}


def _elem(t: str, dtype: dtypes.DType) -> int:
    """The ONNX element type of a GraphSpec type: "float" is the cell's dtype."""
    return dtype.onnx if t == "float" else _ELEM[t]


def build_model(spec: GraphSpec, dtype: dtypes.DType, copies: int = 1, plain_names: bool = False,
                values: dict | None = None) -> bytes:
    """`copies` identical nodes, every output a graph output (so ORT's common-subexpression
    elimination cannot merge them) and every copy reading its own graph inputs (so ORT cannot
    share the Casts it inserts around an op between copies: each copy pays its own). Input i of
    copy k is `<name>__k`, output j is `<name>__k`; Bound binds all copies to the same buffers.
    `plain_names` (one copy only): the spec's own names, for a model handed to people.
    The spec's initializers are constant tensors, one per copy (`<name>__k`: each copy a node of
    a model with its own weight, which ORT prepacks, or casts, for that node: with one shared
    tensor ORT ran one f16 Cast of it for 3 copies, 7 Casts against 3 x 2), with their values
    from `values` (arrays in the model's element type; initializer_values makes them)."""
    def elem(t):
        return _elem(t, dtype)

    if plain_names and copies != 1:
        raise ValueError("plain_names needs copies == 1")
    inits = set(spec.initializers)

    def nm(n, k):
        return n if plain_names else f"{n}__{k}"

    g_inputs, nodes, g_outputs = [], [], []
    initializers = []
    for n in inits:
        if values is None or n not in values:
            raise ValueError(f"{spec.op_type}: initializer {n!r} needs its value (build_model values=)")
    for k in range(copies):
        initializers += [(nm(n, k), n, elem(t), shape) for n, t, shape in spec.inputs if n in inits]
        g_inputs += [helper.make_tensor_value_info(nm(n, k), elem(t), list(shape))
                     for n, t, shape in spec.inputs if n and n not in inits]
        outs = [nm(o[0], k) if o[0] else "" for o in spec.outputs]
        ins = [nm(n, k) if n else "" for n, _, _ in spec.inputs]
        if spec.node_proto is not None:
            node = onnx.NodeProto()
            node.CopyFrom(spec.node_proto)
            del node.input[:]
            del node.output[:]
            node.input.extend(ins)
            node.output.extend(outs)
            node.name = f"node{k}"
            nodes.append(node)
        else:
            nodes.append(helper.make_node(spec.op_type, ins, outs, name=f"node{k}", domain=spec.domain or None,
                                          **spec.attrs))
        g_outputs += [helper.make_tensor_value_info(o, elem(spec.output_type(s[0])), list(s[1]))
                      for o, s in zip(outs, spec.outputs) if o]
    graph = helper.make_graph(nodes, f"{spec.op_type}_x{copies}", g_inputs, g_outputs)
    if spec.opset_imports:
        opsets = [helper.make_opsetid(d, v) for d, v in spec.opset_imports]
    else:
        opsets = [helper.make_opsetid("", spec.opset if not spec.domain else 21)]
        if spec.domain:
            opsets.append(helper.make_opsetid(spec.domain, spec.opset if spec.domain != "com.microsoft" else 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="perfbench")
    model.ir_version = IR_VERSION
    return b"".join([model.SerializeToString(), *_initializer_bytes(initializers, values)])


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


_GRAPH_FIELD = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
_INITIALIZER_FIELD = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number
_T = onnx.TensorProto.DESCRIPTOR.fields_by_name
_DIMS, _DATA_TYPE, _NAME, _RAW = (_T[f].number for f in ("dims", "data_type", "name", "raw_data"))


def _initializer_bytes(initializers: list, values: dict) -> list:
    """The model's initializers as byte strings to append to its serialized ModelProto: one more
    `graph` field holding only initializer entries, which protobuf parsing merges into the graph
    (repeated fields concatenate). Each entry is its name, dims, type and the value's own buffer
    as raw_data, joined once with the model: built as TensorProtos of the graph they took ~1.9 of
    3.4 s a replicate of 1 x 4096 x 4096 f32 with B an initializer (2 copies of 64 MB, Zen 4,
    2026-12-06), mostly copies of the weights."""
    if not initializers:
        return []
    parts, total = [], 0
    for name, source, elem, shape in initializers:
        a = np.ascontiguousarray(values[source])
        if tuple(a.shape) != tuple(shape):
            raise ValueError(f"initializer {name!r}: value of shape {a.shape}, the graph declares {tuple(shape)}")
        if (a.dtype.kind not in "fiub" and a.dtype != dtypes.BF16.numpy) or not a.dtype.isnative \
                or sys.byteorder != "little":
            raise ValueError(f"initializer {name!r}: values of dtype {a.dtype} have no raw_data form here")
        if a.dtype.itemsize != helper.tensor_dtype_to_np_dtype(elem).itemsize:
            raise ValueError(f"initializer {name!r}: values of dtype {a.dtype} for an element type of "
                             f"{helper.tensor_dtype_to_np_dtype(elem).itemsize} bytes")
        data = memoryview(a.reshape(-1).view(np.uint8))
        head = (_key(_NAME, 2) + _varint(len(name.encode())) + name.encode()
                + b"".join(_key(_DIMS, 0) + _varint(int(d)) for d in a.shape)
                + _key(_DATA_TYPE, 0) + _varint(elem) + _key(_RAW, 2) + _varint(len(data)))
        entry = _key(_INITIALIZER_FIELD, 2) + _varint(len(head) + len(data)) + head
        parts += [entry, data]
        total += len(entry) + len(data)
    return [_key(_GRAPH_FIELD, 2) + _varint(total), *parts]


def initializer_values(spec: GraphSpec, inputs: dict) -> dict | None:
    """The values build_model needs for the spec's initializers: those of `inputs` (arrays in the
    model's element type), None for a spec without initializers."""
    return {n: inputs[n] for n in spec.initializers} if spec.initializers else None


def floor_graph(spec: GraphSpec) -> GraphSpec:
    """The cold-cell floor of a graph: the same inputs and outputs (names, element types, count),
    each of one element, every output an Identity of an input of its type (build_floor_model).
    Bound to it, a run pays ORT's per-input and per-output cost of the cell's graph with next to
    no kernel work. Inputs no output needs stay graph inputs, bound like the cell's. A graph
    without named inputs has no such floor (ValueError).

    One Identity per output, not one node for all: measured side by side (benchmarks/cold_floor.py,
    Xeon, 1 thread), a single Split for GroupQueryAttention's three outputs made a floor 5-9 us
    above three Identities -- Split's own cold code, which is kernel work, not harness."""
    ins = [(n, t, (1,)) for n, t, _ in spec.inputs if n and n not in spec.initializers]  # bound per run
    if not ins:
        raise ValueError(f"{spec.op_type}: a floor graph needs at least one named input")
    outs = [(o[0], (1,), o[2] if len(o) > 2 else "float") for o in spec.outputs if o[0]]
    return GraphSpec("Identity", "", 13, ins, outs)


def build_floor_model(floor: GraphSpec, dtype: dtypes.DType) -> bytes:
    """floor_graph's model, named the way Bound binds one copy (`<name>__0`): every output an
    Identity of the first input of its type, or a Cast of the first input where none has it."""
    def elem(t):
        return _elem(t, dtype)

    g_in = [helper.make_tensor_value_info(f"{n}__0", elem(t), [1]) for n, t, _ in floor.inputs]
    nodes, g_out = [], []
    for j, (name, _, t) in enumerate(floor.outputs):
        src = next((n for n, ti, _ in floor.inputs if ti == t), None)
        if src is not None:
            nodes.append(helper.make_node("Identity", [f"{src}__0"], [f"{name}__0"], name=f"floor{j}"))
        else:
            nodes.append(helper.make_node("Cast", [f"{floor.inputs[0][0]}__0"], [f"{name}__0"], name=f"floor{j}",
                                          to=elem(t)))
        g_out.append(helper.make_tensor_value_info(f"{name}__0", elem(t), [1]))
    model = helper.make_model(helper.make_graph(nodes, "floor", g_in, g_out),
                              opset_imports=[helper.make_opsetid("", 13)], producer_name="perfbench")
    model.ir_version = IR_VERSION
    return model.SerializeToString()


def session_options(threads: int, spin: str, profile_dir: str | None = None) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin == "on" else "0")
    if profile_dir:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(profile_dir, "ort")
    return so


def make_session(model: bytes, threads: int, spin: str, profile_dir: str | None = None) -> ort.InferenceSession:
    return ort.InferenceSession(model, session_options(threads, spin, profile_dir), providers=["CPUExecutionProvider"])


def is_missing_kernel(exc: Exception, model: bytes | None = None) -> bool:
    """ORT's load error means 'no kernel in this dtype'. The last form: no kernel, and the op's
    ONNX function body that ORT falls back on does not type-check (ai.onnx Attention-23 in
    bfloat16 with a float attn_mask) -- counted only when `model` itself type-checks, so a
    graph with a type error of its own stays an error."""
    text = str(exc)
    if "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text:
        return True
    if model is not None and "Type Error: Type parameter" in text and "bound to different types" in text:
        try:
            onnx.checker.check_model(onnx.load_from_string(model), full_check=True)
        except Exception:  # noqa: BLE001 - the graph's own error
            return False
        return True
    return False


def element_type(a: np.ndarray):
    """What IOBinding takes as an array's element type: the numpy dtype, or the ONNX code for
    bfloat16 (ORT's Python binding does not know ml_dtypes' bfloat16)."""
    return dtypes.BF16.onnx if a.dtype == dtypes.BF16.numpy else a.dtype


def ortvalue(a: np.ndarray) -> ort.OrtValue:
    """An OrtValue over the array's own memory (no copy; read-only arrays included)."""
    if a.dtype == dtypes.BF16.numpy:
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(a, dtypes.BF16.onnx)
    return ort.OrtValue.ortvalue_from_numpy(a)


class Bound:
    """A session with inputs and every output bound through IOBinding; K outputs of one name
    share one buffer (distinct buffers would inflate write-heavy ops)."""

    def __init__(self, session: ort.InferenceSession, spec: GraphSpec, copies: int, inputs: dict, outputs: dict):
        self.session = session
        self.copies = copies
        self.binding = session.io_binding()
        # ORT reads and writes these buffers by address: keep them (and the OrtValues) alive
        # as long as the binding is.
        self.inputs = inputs
        self.outputs = outputs
        self._keep = []
        for name, _, _ in spec.inputs:
            if not name or name in spec.initializers:  # a constant of the model, not bound
                continue
            value = ortvalue(inputs[name])
            self._keep.append(value)
            for k in range(copies):
                self.binding.bind_ortvalue_input(f"{name}__{k}", value)
        for o in spec.outputs:
            name = o[0]
            if not name:
                continue
            buf = outputs[name]
            for k in range(copies):
                self.binding.bind_output(f"{name}__{k}", "cpu", 0, element_type(buf), list(buf.shape), buf.ctypes.data)
        # Bound methods looked up once: the timed call is one Python call into ORT. (No
        # RunOptions: passing one costs ~70 us per run with ORT 1.31's Python binding here.)
        self._run = self.session.run_with_iobinding
        self._binding = self.binding

    def run(self) -> None:
        self._run(self._binding)


def profile_path(spec: GraphSpec, dtype: dtypes.DType, threads: int, spin: str, inputs: dict,
                 outputs: dict) -> tuple[str, list[str]]:
    """Run once with profiling; classify what ORT executed for this node:
    'kernel' (its own kernel), 'casts' (the op with Casts inserted around it),
    'function' (the op expanded into an ONNX function body, e.g. f16 Softmax), and the
    op types of the nodes it ran, one entry per node."""
    with tempfile.TemporaryDirectory(prefix="perfbench-prof-") as d:
        sess = make_session(build_model(spec, dtype, 1, values=initializer_values(spec, inputs)), threads, spin,
                            profile_dir=d)
        Bound(sess, spec, 1, inputs, outputs).run()
        path = sess.end_profiling()
        with open(path) as f:
            events = json.load(f)
    # one entry per node executed (a Cast-wrapped f16 op lists each Cast): what ORT dispatched
    ops = sorted(e["args"]["op_name"] for e in events
                 if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time") and "op_name" in e.get("args", {}))
    if spec.op_type not in ops:
        kind = "function"
    elif "Cast" in ops:
        kind = "casts"
    else:
        kind = "kernel"
    return kind, ops


def node_runs(model: bytes, threads: int, inputs: dict, outputs: dict, spec: GraphSpec, copies: int) -> dict:
    """Node executions per op type in one run (for the K-copy check: K times the 1-copy counts)."""
    with tempfile.TemporaryDirectory(prefix="perfbench-prof-") as d:
        sess = make_session(model, threads, "off", profile_dir=d)
        Bound(sess, spec, copies, inputs, outputs).run()
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    counts: dict = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            op = e.get("args", {}).get("op_name")
            counts[op] = counts.get(op, 0) + 1
    return counts


def count_node_runs(model: bytes, threads: int, inputs: dict, outputs: dict, spec: GraphSpec, copies: int) -> int:
    """How many node executions of spec.op_type one run performs."""
    return node_runs(model, threads, inputs, outputs, spec, copies).get(spec.op_type, 0)


def dtype_candidates(op, dt: dtypes.DType) -> list:
    """The dtypes ORT is tried in for a cell: its own, then the op's declared substitute
    (CONTRACTS §2)."""
    return [dt] + ([dtypes.get(op.ort_substitute[dt.name])] if dt.name in op.ort_substitute else [])


def first_session(op, graph: GraphSpec, dt: dtypes.DType, threads: int, spin: str, inputs: dict | None = None):
    """(ORT dtype, session) for the first candidate dtype ORT has a kernel for, (None, None) if
    none has; any other load error raises. `inputs` (the cell's) give the graph's initializers
    their values; without them an initializer holds zeros (which kernel ORT has does not depend
    on them)."""
    for cdt in dtype_candidates(op, dt):
        if inputs is not None:
            values = initializer_values(graph, to_ort_dtype({n: inputs[n] for n in graph.initializers}, cdt))
        else:
            values = {n: np.zeros(shape, cdt.numpy if t == "float" else ELEM_TYPES[t])
                      for n, t, shape in graph.inputs if n in graph.initializers}
        model = build_model(graph, cdt, values=values)
        try:
            return cdt, make_session(model, threads, spin)
        except Exception as e:  # noqa: BLE001 - a missing kernel means: try the next dtype
            if not is_missing_kernel(e, model):
                raise
    return None, None


def run_case(op, case, inputs: dict, dt: dtypes.DType, threads: int = 1, spin: str = "off",
             fill: float | None = None):
    """ORT once on a case, bound as the harness binds it (its own copy of aliased inputs: a shared
    KV cache is that copy); `fill` pre-fills the outputs that are not inputs. Returns (ORT dtype,
    ORT's inputs, outputs), or None if ORT has no kernel in any candidate dtype."""
    graph = op.graph(case)
    cdt, sess = first_session(op, graph, dt, threads, spin, inputs)
    if sess is None:
        return None
    theirs = op.private_inputs(case, to_ort_dtype(inputs, cdt))
    out = op.new_outputs(case, cdt.numpy, theirs)
    if fill is not None:
        for a in out.values():
            if not any(a is v for v in theirs.values()):
                a[...] = fill
    Bound(sess, graph, 1, theirs, out).run()
    return cdt, theirs, out


def to_ort_dtype(arrays: dict, dtype: dtypes.DType) -> dict:
    """Float arrays converted (exactly, when widening) to the ORT dtype; integers untouched.
    Read-only arrays already in that dtype are shared, not copied (no side can write them: a
    large read-only table, e.g. Gather's memory-mapped embedding table, stays one copy)."""
    floats = {d.numpy for d in dtypes.ALL}

    def conv(v):
        if v.dtype not in floats or (v.dtype == dtype.numpy and not v.flags.writeable):
            return v
        return np.asarray(v.astype(dtype.numpy), order="C")  # 0-d stays 0-d

    return {k: conv(v) for k, v in arrays.items()}
