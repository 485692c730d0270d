"""`perfbench node`, stage 1: load the single-node model and its data (the ONNX test-data layout,
or shapes to generate from), checked against each other; every error is a UsageError."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.ops.base import NodeInfo

_FLOAT_CODES = {d.onnx: d for d in dtypes.ALL}


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


def np_dtype(code: int, where: str) -> np.dtype:
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
    want = np_dtype(code, source)
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


def input_shape(prob: Problem, name: str) -> tuple:
    if name in prob.arrays:
        return tuple(prob.arrays[name].shape)
    if name in prob.initializers:
        return tuple(prob.initializers[name].shape)
    for n, _, ds in prob.graph_inputs:
        if n == name:
            return tuple(d if isinstance(d, int) else prob.dims[d] for d in ds)
    raise KeyError(name)


def input_dtype(prob: Problem, name: str) -> np.dtype:
    if name in prob.initializers:
        return prob.initializers[name].dtype
    for n, code, _ in prob.graph_inputs:
        if n == name:
            return np_dtype(code, prob.where)
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
        inputs.append((input_dtype(prob, name), input_shape(prob, name)))
        values.append(prob.initializers.get(name, prob.arrays.get(name)))
    dt = None
    for spec in inputs:
        if spec is not None and (spec[0].kind == "f" or spec[0] == dtypes.BF16.numpy):
            dt = next((x.name for x in dtypes.ALL if x.numpy == spec[0]), str(spec[0]))
            break
    return NodeInfo(op_type=node.op_type, domain="" if node.domain in ("", "ai.onnx") else node.domain,
                    opset=prob.opset, attrs=attrs, inputs=inputs, outputs=list(node.output), dtype=dt, values=values,
                    constants={i for i, name in enumerate(node.input) if name and name in prob.initializers})
