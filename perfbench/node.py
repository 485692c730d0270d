"""`perfbench node MODEL.onnx`: one node of a real model, our kernel against ORT's on exactly
that node: parity first, then timing by the usual protocol.

The model must hold exactly one node. Its inputs come from a test-data folder in the standard
ONNX layout (`input_K.pb` per graph input in order, optionally `output_K.pb` expected outputs per
graph output), or are generated from the declared shapes by the op's own seeded generator
(symbolic dimensions need --dim NAME=VALUE). Initializers are data: they are used as given (and
bound as inputs in the timed graphs, as in every cell).

Reference (what "matches" means): the expected outputs when given -- they are the
specification: ours is judged against them alone, and ORT disagreeing with them is ORT's
discrepancy; otherwise ORT's outputs on the same inputs. Tolerance: 2 x the dtype's floor
(CONTRACTS §8 error: relative, normalized by the RMS of each row), because the reference is
itself rounded to the dtype. The float64 oracle of the op (where it has one) is reported as well.

Exit codes (CONTRACTS §6): 0 ours matches; 1 a numerics mismatch; 2 usage or input errors; 3 our
library cannot run the node (one line says what is missing; takes precedence over 4); 4 no
reference (ORT cannot run the node and no expected outputs were given).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from perfbench import dtypes, numerics, ops
from perfbench.errors import NativeError, UsageError
from perfbench.ops import ort as ortlib
from perfbench.ops.base import ELEM_TYPES, GraphSpec, NodeBinding, NodeInfo, NodeUnsupported, Op

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_OURS_CANNOT, EXIT_NO_REFERENCE = 0, 1, 2, 3, 4
MAX_GENERATED_BYTES = 4 * 2**30
TOL_FACTOR = 2.0
DEFAULT_REPLICATES = 8  # as a suite's default (CONTRACTS §4)  # tolerance = TOL_FACTOR x the dtype's floor (the reference is rounded too)
SEED = 20261129
_FLOAT_CODES = {d.onnx: d for d in dtypes.ALL}


class OursCannot(Exception):
    """Our library cannot run the node (exit 3); the message is the one line saying why."""


# ---------------------------------------------------------------------------- the problem ----
@dataclass
class Problem:
    """A single-node model with its inputs: what `perfbench node` judges and times."""

    path: Path
    model: onnx.ModelProto
    node: onnx.NodeProto
    opset: int
    graph_inputs: list  # [(name, elem type code, declared dims)] non-initializer graph inputs, in order
    graph_outputs: list  # [(name, elem type code, declared dims)]
    initializers: dict  # name -> array
    arrays: dict = field(default_factory=dict)  # name -> array for every node input (given or generated)
    expected: dict | None = None  # graph output name -> array (from output_K.pb)
    generated: list = field(default_factory=list)  # names of inputs perfbench generated
    notes: list = field(default_factory=list)
    dims: dict = field(default_factory=dict)  # symbolic dimension -> value

    @property
    def where(self) -> str:
        return str(self.path)

    def node_label(self) -> str:
        dom = self.node.domain or "ai.onnx"
        return f"{dom}::{self.node.op_type} (opset {self.opset})"


def _np_dtype(code: int, where: str) -> np.dtype:
    if code in _FLOAT_CODES:
        return _FLOAT_CODES[code].numpy
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(code))
    except Exception as e:  # noqa: BLE001
        raise UsageError(f"{where}: element type {code} is not supported ({e})") from e


def _type_name(code: int) -> str:
    return onnx.TensorProto.DataType.Name(code).lower()


def _dims(vi: onnx.ValueInfoProto) -> list | None:
    """Declared dims: ints, str (symbolic) or None (unknown); None if the rank is unknown."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    out = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            out.append(d.dim_param)
        else:
            out.append(None)
    return out


def load_model(path: str) -> tuple:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{path}: no such file (give the path of a single-node .onnx model)")
    try:
        model = onnx.load(str(p))
    except Exception as e:  # noqa: BLE001
        raise UsageError(f"{path}: not a readable ONNX model ({e.__class__.__name__}: {e})") from e
    nodes = list(model.graph.node)
    if len(nodes) != 1:
        kinds = ", ".join(sorted({n.op_type for n in nodes})) or "none"
        raise UsageError(f"{path}: the graph has {len(nodes)} nodes ({kinds}); perfbench node takes a model of exactly "
                         "one node (cut one out with onnx.utils.extract_model, or `perfbench repro` writes one)")
    node = nodes[0]
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    versions = {("" if o.domain in ("", "ai.onnx") else o.domain): o.version for o in model.opset_import}
    if domain not in versions:
        raise UsageError(f"{path}: the model imports no opset for the node's domain {node.domain or 'ai.onnx'!r}")
    if not model.graph.output:
        raise UsageError(f"{path}: the model has no graph outputs: nothing to compare")
    checked = onnx.ModelProto()
    checked.CopyFrom(model)
    checked.ir_version = max(checked.ir_version, 10)  # the checker wants an IR that knows the opset
    try:  # valid ONNX: known attributes of the right types, consistent shapes and types
        onnx.checker.check_model(checked, full_check=True)
    except Exception as e:  # noqa: BLE001
        msg = str(e).strip().splitlines()[0][:300]
        # an op only ORT defines in the default domain (SimplifiedLayerNormalization): onnx has no
        # schema to check it against; ORT (and from_node) judge it
        if f"No Op registered for {node.op_type} with domain_version" not in msg:
            raise UsageError(f"{path}: not a valid ONNX model: {msg}") from e
    return p, model, node, int(versions[domain])


def read_tensor(path: Path) -> tuple:
    """(name, array) of one TensorProto file."""
    try:
        t = onnx.TensorProto()
        t.ParseFromString(path.read_bytes())
        if t.data_type == dtypes.BF16.onnx:
            raw = numpy_helper.to_array(t)
            arr = np.asarray(raw).view(dtypes.BF16.numpy) if raw.dtype != dtypes.BF16.numpy else np.asarray(raw)
        else:
            arr = numpy_helper.to_array(t)
    except Exception as e:  # noqa: BLE001
        raise UsageError(f"{path}: not a readable TensorProto ({e.__class__.__name__}: {e})") from e
    return t.name, np.asarray(arr, order="C")  # keeps 0-d arrays 0-d


def _numbered(folder: Path, stem: str) -> list:
    found = {}
    for f in folder.iterdir():
        m = re.fullmatch(rf"{stem}_(\d+)\.pb", f.name)
        if m:
            found[int(m.group(1))] = f
    keys = sorted(found)
    if keys != list(range(len(keys))):
        raise UsageError(f"{folder}: {stem}_K.pb files must be numbered 0..N-1 without gaps (found "
                         f"{', '.join(found[k].name for k in keys)})")
    return [found[k] for k in keys]


def parse_dims(values) -> dict:
    out = {}
    for v in values or ():
        m = re.fullmatch(r"\s*([A-Za-z_][\w.\-]*)\s*=\s*(\d+)\s*", str(v))
        if not m or int(m.group(2)) < 1:
            raise UsageError(f"--dim {v!r}: expected NAME=VALUE with a positive integer, e.g. --dim seq=128")
        out[m.group(1)] = int(m.group(2))
    return out


def _check_fits(name: str, arr: np.ndarray, code: int, dims, bound: dict, source: str) -> None:
    want = _np_dtype(code, source)
    if arr.dtype != want:
        raise UsageError(f"{source}: {name!r} is {arr.dtype} but the model declares {_type_name(code)}")
    if dims is None:
        return
    if len(dims) != arr.ndim:
        raise UsageError(f"{source}: {name!r} has shape {arr.shape} (rank {arr.ndim}) but the model declares rank "
                         f"{len(dims)} {tuple(dims)}")
    for i, (d, n) in enumerate(zip(dims, arr.shape)):
        if isinstance(d, int) and d != n:
            raise UsageError(f"{source}: {name!r} has shape {arr.shape}; the model declares {tuple(dims)} "
                             f"(axis {i}: {n} != {d})")
        if isinstance(d, str):
            if bound.setdefault(d, n) != n:
                raise UsageError(f"{source}: {name!r} axis {i} is {n}, but the symbolic dimension {d!r} is "
                                 f"{bound[d]} elsewhere (from another input or --dim)")


def load(model_path: str, data: str | None = None, dims: dict | None = None) -> Problem:
    """The model and its given data, checked against each other (every error is a UsageError)."""
    path, model, node, opset = load_model(model_path)
    g = model.graph
    init = {}
    for t in g.initializer:
        _, arr = read_tensor_proto(t, f"{path}: initializer {t.name!r}")
        init[t.name] = arr
    ginputs = [(vi.name, vi.type.tensor_type.elem_type, _dims(vi)) for vi in g.input if vi.name not in init]
    goutputs = [(vi.name, vi.type.tensor_type.elem_type, _dims(vi)) for vi in g.output]
    prob = Problem(path, model, node, opset, ginputs, goutputs, init)
    known = set(init) | {n for n, _, _ in ginputs}
    for i, name in enumerate(node.input):
        if name and name not in known:
            raise UsageError(f"{path}: node input {i} {name!r} is neither a graph input nor an initializer")
    for name, _, _ in goutputs:
        if name not in node.output:
            raise UsageError(f"{path}: graph output {name!r} is not an output of the node")
    dims = dict(dims or {})
    symbolic = sorted({d for _, _, ds in ginputs for d in (ds or []) if isinstance(d, str)})
    unknown = sorted(set(dims) - set(symbolic))
    if unknown:
        raise UsageError(f"--dim {', '.join(unknown)}: the model has no such symbolic dimension"
                         + (f" (its symbolic dimensions: {', '.join(symbolic)})" if symbolic else " (it has none)"))
    bound = dict(dims)
    if data is not None:
        folder = Path(data)
        if not folder.is_dir():
            raise UsageError(f"--data {data}: not a folder (expected input_0.pb ... in the ONNX test-data layout)")
        files = _numbered(folder, "input")
        if len(files) != len(ginputs):
            names = ", ".join(n for n, _, _ in ginputs) or "none"
            raise UsageError(f"--data {data}: {len(files)} input_K.pb files, but the model has {len(ginputs)} graph "
                             f"inputs ({names}) besides its initializers: one file per input, in order")
        for f, (name, code, ds) in zip(files, ginputs):
            tname, arr = read_tensor(f)
            if tname and tname != name:
                prob.notes.append(f"{f.name} is named {tname!r}; used as graph input {name!r} (files go by order)")
            _check_fits(name, arr, code, ds, bound, f"--data {f}")
            prob.arrays[name] = arr
        outs = _numbered(folder, "output")
        if outs:
            if len(outs) != len(goutputs):
                raise UsageError(f"--data {data}: {len(outs)} output_K.pb files, but the model has {len(goutputs)} "
                                 "graph outputs: give all expected outputs or none")
            prob.expected = {}
            for f, (name, code, ds) in zip(outs, goutputs):
                _, arr = read_tensor(f)
                _check_fits(name, arr, code, ds, dict(bound), f"--data {f}")
                prob.expected[name] = arr
    else:
        for name, _code, ds in ginputs:
            if ds is None:
                raise UsageError(f"{path}: input {name!r} has no declared shape; give the inputs with --data DIR")
            missing = [d for d in ds if d is None or (isinstance(d, str) and d not in bound)]
            if missing:
                need = sorted({d for d in missing if isinstance(d, str)})
                raise UsageError(f"{path}: input {name!r} has shape {tuple(ds)} with "
                                 + (f"symbolic dimensions {', '.join(need)}: give --dim "
                                    + " ".join(f"{d}=VALUE" for d in need) if need else "unknown dimensions")
                                 + " (or give the inputs with --data DIR)")
    prob.dims = bound
    return prob


def read_tensor_proto(t: onnx.TensorProto, where: str) -> tuple:
    try:
        arr = numpy_helper.to_array(t)
        if t.data_type == dtypes.BF16.onnx and arr.dtype != dtypes.BF16.numpy:
            arr = np.asarray(arr).view(dtypes.BF16.numpy)
    except Exception as e:  # noqa: BLE001
        raise UsageError(f"{where}: cannot be read ({e})") from e
    return t.name, np.asarray(arr, order="C")  # keeps 0-d arrays 0-d


def _input_shape(prob: Problem, name: str) -> tuple:
    if name in prob.arrays:
        return tuple(prob.arrays[name].shape)
    if name in prob.initializers:
        return tuple(prob.initializers[name].shape)
    for n, _, ds in prob.graph_inputs:
        if n == name:
            return tuple(d if isinstance(d, int) else prob.dims[d] for d in ds)
    raise KeyError(name)


def _input_dtype(prob: Problem, name: str) -> np.dtype:
    if name in prob.initializers:
        return prob.initializers[name].dtype
    for n, code, _ in prob.graph_inputs:
        if n == name:
            return _np_dtype(code, prob.where)
    raise KeyError(name)


def node_info(prob: Problem) -> NodeInfo:
    node = prob.node
    attrs = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [x.decode("utf-8", "replace") for x in v]
        attrs[a.name] = v
    inputs, values = [], []
    for name in node.input:
        if not name:
            inputs.append(None)
            values.append(None)
            continue
        inputs.append((_input_dtype(prob, name), _input_shape(prob, name)))
        values.append(prob.initializers.get(name, prob.arrays.get(name)))
    dt = None
    for spec in inputs:
        if spec is not None and (spec[0].kind == "f" or spec[0] == dtypes.BF16.numpy):
            dt = next((x.name for x in dtypes.ALL if x.numpy == spec[0]), str(spec[0]))
            break
    return NodeInfo(op_type=node.op_type, domain="" if node.domain in ("", "ai.onnx") else node.domain,
                    opset=prob.opset, attrs=attrs, inputs=inputs, outputs=list(node.output), dtype=dt, values=values)


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
                         "int32 and bool inputs)")

    def graph(self, case=None) -> GraphSpec:
        ins = [(f"i{k}" if spec else "", self._type(spec[0]) if spec else "float", spec[1] if spec else ())
               for k, spec in enumerate(self.info.inputs)]
        outs = []
        for j, name in enumerate(self.info.outputs):
            if name and j in self._out_shape:
                code = next((c for n, c, _ in self.prob.graph_outputs if n == name), None)
                t = self._type(_np_dtype(code, self.prob.where)) if code else "float"
                outs.append((f"o{j}", self._out_shape[j], t))
            else:
                outs.append(("", ()))
        imports = tuple((o.domain if o.domain != "ai.onnx" else "", o.version) for o in self.prob.model.opset_import)
        return GraphSpec(self.info.op_type, self.info.domain, self.info.opset, ins, outs,
                         opset_imports=imports, node_proto=self.prob.node)

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


# ------------------------------------------------------------------------------ judging ----
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


def generate_inputs(prob: Problem, op: Op, binding: NodeBinding, info: NodeInfo, seed: int) -> None:
    """Inputs the user did not give: the op's own seeded generator (its planted probes
    included), reshaped to the node's shapes."""
    missing = [n for n, _, _ in prob.graph_inputs if n not in prob.arrays]
    if not missing:
        return
    total = sum(math.prod(_input_shape(prob, n)) * _input_dtype(prob, n).itemsize for n in missing)
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
        want = _input_dtype(prob, name)
        if arr.dtype != want:
            arr = arr.astype(want)
        prob.arrays[name] = np.asarray(arr.reshape(_input_shape(prob, name)), order="C")
        prob.generated.append(name)
    for n in missing:
        if n not in prob.arrays:  # a graph input the node does not read: zeros of its declared shape
            prob.arrays[n] = np.zeros(_input_shape(prob, n), _input_dtype(prob, n))
            prob.generated.append(n)


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
    from perfbench.compare import verdicts
    from perfbench.timing.protocol import CellOutcome, CellSpec, Harness, OrtSideError, OursSideError

    dt = dtypes.get(nop.info.dtype)
    inputs = {f"i{k}": prob.arrays.get(n, prob.initializers.get(n)) for k, n in enumerate(prob.node.input) if n}
    spec = CellSpec(op=nop.name, params=[], dtype=dt.name, threads=threads, replicates=replicates)
    h = Harness(lib, progress=lambda phase, **facts: progress(phase))
    graph = nop.graph()
    out = CellOutcome(isa=lib.isa_active)
    try:
        ort_dt, _ = ortlib.first_session(nop, graph, dt, threads, "off")
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
            v = verdicts.decide(out.ours_status, out.ort_status, out.ours_ns, out.ort_ns)
            res.update(K=out.K, ratio=v.ratio, ci=[v.lo, v.hi] if v.ratio is not None else None, verdict=v.verdict,
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


# --------------------------------------------------------------------------------- save ----
def check_save(folder: str, data: str | None) -> Path:
    """The --save folder, checked before any work: a new folder (or an empty one), never the
    --data folder, in a parent that exists."""
    out = Path(folder).resolve()
    if data is not None and out == Path(data).resolve():
        raise UsageError(f"--save {folder} is the --data folder: --save writes a new folder, never over the data")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--save {folder}: exists and is not an empty folder (it writes a new folder)")
    if not out.parent.is_dir():
        raise UsageError(f"--save {folder}: the parent folder {out.parent} does not exist")
    return out


def save(prob: Problem, ours: dict, reference: dict | None, matched: bool, folder: str, data: str | None) -> str:
    """DIR/model.onnx (the model, external data inlined), DIR/input_K.pb (the inputs used) and
    our outputs: as DIR/output_K.pb when they matched the reference (a replay then checks
    against them), else as DIR/ours_output_K.pb, with the reference (if any) as output_K.pb.
    Written to a temporary folder, then moved into place."""
    out = check_save(folder, data)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".perfbench-node-", dir=out.parent))
    except OSError as e:
        raise UsageError(f"--save {folder}: cannot write in {out.parent} ({e.strerror})") from e
    try:
        onnx.save(prob.model, str(tmp / "model.onnx"))
        for k, (name, _, _) in enumerate(prob.graph_inputs):
            (tmp / f"input_{k}.pb").write_bytes(numpy_helper.from_array(prob.arrays[name], name).SerializeToString())
        name_of = {n: f"o{j}" for j, n in enumerate(prob.node.output)}
        for k, (name, _, _) in enumerate(prob.graph_outputs):
            arr = np.asarray(ours[name_of[name]], order="C")
            mine = numpy_helper.from_array(arr, name).SerializeToString()
            if matched:
                (tmp / f"output_{k}.pb").write_bytes(mine)
                continue
            (tmp / f"ours_output_{k}.pb").write_bytes(mine)
            if reference is not None:
                ref = np.asarray(np.asarray(reference[name]).astype(arr.dtype), order="C")
                (tmp / f"output_{k}.pb").write_bytes(numpy_helper.from_array(ref, name).SerializeToString())
        os.chmod(tmp, 0o755)
        if out.exists():  # an empty folder: move the files in
            for f in tmp.iterdir():
                os.rename(f, out / f.name)
            tmp.rmdir()
        else:
            os.rename(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UsageError(f"--save {folder}: {e.strerror or e}") from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return str(out)


# ---------------------------------------------------------------------------------- run ----
def run(model: str, data: str | None = None, dims=None, threads: int = 1, save_to: str | None = None,
        timing: bool = True, replicates: int = DEFAULT_REPLICATES, seed: int = SEED, lib=None,
        progress=lambda s: None) -> Report:
    """The whole command; returns the report (its exit_code is the command's)."""
    if not isinstance(threads, int) or not 1 <= threads <= 256:
        raise UsageError(f"--threads {threads}: expected an integer in 1..256")
    if replicates < 2:
        raise UsageError("--replicates must be >= 2 (a CI needs at least two replicates)")
    prob = load(model, data, parse_dims(dims))
    if save_to is not None:  # fail before any work, not after it
        check_save(save_to, data)
    rep = Report(node=prob.node_label(), threads=threads, notes=list(prob.notes))
    info = node_info(prob)
    rep.dtype = info.dtype
    op = binding = nop = None
    try:
        op, binding = bind(prob, info)
        rep.op, rep.case = op.name, binding.case.case_id
        nop = NodeOp(prob, info, op, binding)
        nop.graph()  # every input and output type must be one we can bind
    except OursCannot as e:
        op = binding = nop = None
        rep.ours_status, rep.ours_message = "unsupported", str(e)
    if op is not None:
        try:
            generate_inputs(prob, op, binding, info, seed)
        except MemoryError as e:
            raise UsageError("not enough memory to generate the inputs: smaller --dim values, or --data") from e
    for name in prob.node.input:
        a = prob.initializers.get(name, prob.arrays.get(name)) if name else None
        if a is not None:
            src = "initializer" if name in prob.initializers else "generated" if name in prob.generated else "given"
            rep.inputs.append((name, src, str(a.dtype), list(a.shape)))
    if op is None and any(n not in prob.arrays for n, _, _ in prob.graph_inputs):
        rep.notes.append("inputs were not generated (our library cannot run the node), so ORT was not run"
                         + ("; nothing was saved" if save_to else ""))
        rep.exit_code = EXIT_OURS_CANNOT
        return rep

    progress("ort: numerics")
    rep.ort_status, rep.ort_message, ort_out = run_ort(prob, threads)
    if op is None:
        if save_to:
            rep.notes.append("nothing was saved: our library cannot run the node")
        rep.exit_code = EXIT_OURS_CANNOT
        return rep

    if lib is None:
        from perfbench.kernels_ffi import load as load_lib
        lib = load_lib()
    dt = dtypes.get(info.dtype)
    inputs = {f"i{k}": prob.arrays.get(n, prob.initializers.get(n)) for k, n in enumerate(prob.node.input) if n}
    ours = nop.new_outputs(None, dt.numpy, inputs)
    progress("ours: numerics")
    try:
        nop.prepare_ours(lib, None, {k: v.copy() for k, v in inputs.items()}, ours, threads).run()
    except NativeError as e:
        # our kernel declining an argument it does not implement: exit 3; any other status is ours failing
        rep.ours_status = "unsupported" if e.status == 2 else "error"
        rep.ours_message = f"our kernel {e.kernel}: {e.message}"
        rep.exit_code = EXIT_OURS_CANNOT if e.status == 2 else EXIT_MISMATCH
        return rep
    except UsageError as e:  # the op's wrapper refusing what its from_node accepted: ours failing
        rep.ours_status, rep.ours_message = "error", str(e)
        rep.exit_code = EXIT_MISMATCH
        return rep
    judge(prob, nop, ours, ort_out, rep, op.floor(dt.name))
    if rep.exit_code == EXIT_MISMATCH:
        rep.ours_status = "mismatch"
    if save_to is not None:
        reference = prob.expected if prob.expected is not None else ort_out
        rep.saved = save(prob, ours, reference, rep.exit_code == EXIT_OK, save_to, data)
        rep.saved_ours_as_expected = rep.exit_code == EXIT_OK
    if timing and rep.exit_code == EXIT_OK:
        progress("timing")
        rep.timing = time_node(lib, nop, prob, threads, replicates, progress=progress)
    return rep


# ------------------------------------------------------------------------------ printing ----
def _fmt_ns(ns) -> str:
    if ns is None:
        return "-"
    return f"{ns / 1000:.2f} us" if ns >= 1000 else f"{ns:.0f} ns"


def render(rep: Report) -> str:
    lines = [f"node: {rep.node}" + (f" -> our {rep.op} as {rep.case}" if rep.op else "")
             + (f", {rep.dtype}" if rep.dtype else "") + f", threads={rep.threads}"]
    for name, src, dt, shape in rep.inputs:
        lines.append(f"  input {name}: {dt}{tuple(shape)} ({src})")
    if rep.ours_status == "unsupported":
        lines.append(f"ours: cannot run this node: {rep.ours_message}")
    elif rep.ours_status == "error":
        lines.append(f"ours: error: {rep.ours_message}")
    ort = rep.ort_status + (f": {rep.ort_message}" if rep.ort_message else "")
    lines.append(f"ORT: {ort}")
    if rep.checks:
        lines.append(f"reference: {rep.reference}; tolerance {rep.tol:.3g} (2 x the {rep.dtype} floor)" if rep.tol
                     else "reference: none")
        for c in rep.checks:
            s = (f"  output {c.name}: err(ours vs reference) = {c.err:.3g}" if rep.reference
                 else f"  output {c.name}: no reference")
            if c.err_ort is not None:
                s += f", err(ORT vs expected) = {c.err_ort:.3g}"
            if c.err_oracle_ours is not None:
                s += f"; vs the float64 oracle: ours {c.err_oracle_ours:.3g}" + (
                    f", ORT {c.err_oracle_ort:.3g}" if c.err_oracle_ort is not None else "")
            lines.append(s)
            if c.where is not None:
                lines.append(f"    worst at index {c.where}: ours {c.ours:.6g}, reference {c.ref:.6g}")
    if rep.timing:
        t = rep.timing
        lines.append(f"timing ({t['replicates']} replicates, warm" + (f", ORT K={t['K']} copies" if t["K"] else "")
                     + f"): ours {_fmt_ns(t['ours_median_ns'])}"
                     + (f", ORT {_fmt_ns(t['ort_median_ns'])}" if t["ort_median_ns"] is not None else "")
                     + (f" (ORT in {t['ort_dtype']})" if t["ort_dtype"] and t["ort_dtype"] != rep.dtype else ""))
        if t["ratio"] is not None:
            lines.append(f"  ours/ORT {t['ratio']:.3f} [{t['ci'][0]:.3f}, {t['ci'][1]:.3f}] -> {t['verdict']}"
                         + (f" ({t['verdict_note']})" if t["verdict_note"] else ""))
        elif t["verdict_note"]:
            lines.append(f"  {t['verdict_note']}")
        if t["bound"] == "memory" and t["ours_gbps"]:
            lines.append(f"  {t['bytes'] / 1e6:.3g} MB moved: ours {t['ours_gbps']:.1f} GB/s"
                         + (f", ORT {t['ort_gbps']:.1f} GB/s" if t["ort_gbps"] else ""))
    for n in rep.notes:
        lines.append(f"note: {n}")
    if rep.saved:
        what = ("our outputs as output_K.pb" if rep.saved_ours_as_expected else
                "our outputs as ours_output_K.pb (they did not match" + (", the reference is output_K.pb)"
                                                                        if rep.reference else ")"))
        lines.append(f"saved the model, the inputs used and {what} to {rep.saved}/ (replay: perfbench node "
                     f"{rep.saved}/model.onnx --data {rep.saved})")
    verdict = {0: "PASS: ours matches the reference", 1: "FAIL: numerics mismatch",
               2: "ERROR", 3: "CANNOT RUN: our library cannot run this node",
               4: "NO REFERENCE: ORT cannot run the node and no expected outputs were given"}[rep.exit_code]
    lines.append(f"{verdict} (exit {rep.exit_code})")
    return "\n".join(lines)
