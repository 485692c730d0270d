"""What an operator file declares, and the registry it joins (house rule 1: one op = one file).

An op file subclasses Op and decorates it with @register. It declares its parameters (the axes a
suite can sweep), how to make seeded inputs with planted probes, its single-node ORT graph, how
to call our kernel, a float64 oracle, which rows the error is normalized over, its flop and byte
counts, and its mutants (negative controls for the numerics gate). Nothing central changes when
an op is added.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from perfbench import dtypes, numerics
from perfbench.errors import UsageError

CASE_ID_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.=-")

# The most bytes one case's inputs may take (every input of its graph, floats counted at 2 bytes,
# the narrowest type we run): 4 GiB, the cap `perfbench node` put on the inputs it generates in
# their own type (it imports this). A guard against absurd shapes (a 10**12-head or 32 TiB case),
# not a memory budget: an f32 cell of a case at the cap holds 8 GiB of inputs, its outputs and
# the float64 oracle's copies besides. Counting outputs too, or floats at f32, refused f16 nodes
# `node` ran before (Softmax 32768 x 40000: 2.4 GiB in). Shipped suites stay far below it (the
# largest, a 1 GiB Gather table, is about 1.05 GB).
MAX_CASE_BYTES = 4 * 2**30
# integer parameters end up in the kernels' int64 argument fields
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# bounds several ops share: attention heads (real models have at most 128) and the longest head
# the attention kernels take (PB_ATT_MAX_HEAD in native/cpu/common/checks.h)
MAX_HEADS = 1024
MAX_ATTENTION_HEAD_SIZE = 1024


@dataclass(frozen=True)
class Param:
    """One parameter of an op: an axis a suite may sweep, with a default when not swept."""

    name: str
    kind: type  # int or str
    default: object = None  # None = required
    choices: tuple = ()
    minimum: int | None = None
    maximum: int | None = None
    help: str = ""

    def check(self, value, where: str):
        if self.kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise UsageError(f"{where}: {self.name} must be an integer, got {value!r}")
            if self.minimum is not None and value < self.minimum:
                raise UsageError(f"{where}: {self.name} must be >= {self.minimum}, got {value}")
            if self.maximum is not None and value > self.maximum:
                raise UsageError(f"{where}: {self.name} must be <= {self.maximum}, got {value}: give a smaller "
                                 f"{self.name}" + (f" ({self.help})" if self.help else ""))
            if not INT64_MIN <= value <= INT64_MAX:
                raise UsageError(f"{where}: {self.name}={value} does not fit in a 64-bit integer (the kernels' "
                                 f"sizes are int64): give a value in [{INT64_MIN}, {INT64_MAX}]")
        elif self.kind is str:
            if not isinstance(value, str):
                raise UsageError(f"{where}: {self.name} must be a string, got {value!r}")
        if self.choices and value not in self.choices:
            raise UsageError(
                f"{where}: {self.name}={value!r} is not one of {', '.join(map(repr, self.choices))}"
            )
        return value


@dataclass(frozen=True)
class Case:
    """One point of an op's parameter space. The id is stable: same parameters, same id."""

    op: str
    params: tuple  # ((name, value), ...) in the op's declared order

    @property
    def p(self) -> dict:
        return dict(self.params)

    @property
    def case_id(self) -> str:
        return self.op + "".join(f".{k}={v}" for k, v in self.params)


def tail_len(n: int) -> int:
    """Elements a vector loop without its tail would drop from a run of n (mutants use it): n % 8
    (8 lanes) if any, else n % 16 (16 lanes), else a whole last vector."""
    return n % 8 or n % 16 or min(16, n)


@dataclass
class Mutant:
    """A realistic wrong answer: the oracle with one bug switched on (a negative control)."""

    name: str
    outputs: Callable  # (op, case, inputs_f64) -> dict of float64 outputs
    applies: Callable = lambda case: True  # noqa: E731


@dataclass
class GraphSpec:
    """A single ONNX node: what ORT runs."""

    op_type: str
    domain: str
    opset: int
    # [(name, type, shape)] in node order; type: "float" = the cell's dtype, or one of ELEM_TYPES
    # ("f32" = float32 whatever the cell's dtype, "int64", "int32", "bool", "uint8"); a name "" leaves that
    # optional input out; a str in a shape is a symbolic dimension
    inputs: list
    # [(name, shape)] outputs of the cell's dtype, or [(name, shape, type)] with a type as above
    # (e.g. LayerNormalization's Mean is float32 for every input type); a name "" leaves an
    # optional output out
    outputs: list
    attrs: dict = field(default_factory=dict)
    # ((domain, version), ...) the model imports; empty: the op's domain at `opset` (plus the
    # default domain at 21 for a non-default domain)
    opset_imports: tuple = ()
    # an onnx NodeProto to copy instead of building the node from op_type/domain/attrs (a user's
    # node, attributes exactly as given); its inputs and outputs are renamed per copy
    node_proto: object = None
    # names of inputs that ORT's model holds as constant initializers (a model's weights), with
    # the cell's input values: ORT prepacks those at session creation (MatMul's B), so what a
    # weight costs in a model is measured only this way. Each copy of the node has its own copy
    # of the tensor, as each node of a model its own weight (ortlib.build_model); never bound per
    # run (ortlib.Bound); its shape is concrete (no symbolic dimension)
    initializers: tuple = ()

    def output_type(self, name: str) -> str:
        for o in self.outputs:
            if o[0] == name:
                return o[2] if len(o) > 2 else "float"
        raise KeyError(name)


# numpy dtypes of the non-"float" element types of GraphSpec inputs and outputs
ELEM_TYPES = {"f32": np.dtype(np.float32), "int64": np.dtype(np.int64), "int32": np.dtype(np.int32),
              "bool": np.dtype(np.bool_), "uint8": np.dtype(np.uint8)}


class NodeUnsupported(Exception):
    """Our library cannot run this node (an op, attribute value, dtype or shape we do not
    implement). The message is one line saying exactly what is missing (`perfbench node` exit 3)."""


@dataclass
class NodeInfo:
    """One ONNX node as `perfbench node` hands it to an op's from_node."""

    op_type: str
    domain: str  # "" for the default (ai.onnx) domain
    opset: int  # the opset version imported for the node's domain
    attrs: dict  # name -> value (onnx.helper.get_attribute_value; strings decoded)
    # [(numpy dtype, shape tuple of ints)] per node input in node order; None for an absent
    # optional input (an empty name)
    inputs: list
    # the node's output names in order ("" for an optional output it does not ask for)
    outputs: list
    dtype: str | None  # "f32" / "f16" / "bf16": the element type of the node's first float input
    # per node input: its array when the value is known before running (an initializer, or data
    # given with --data), else None. Inputs that steer the computation (ReduceMean's axes,
    # Trilu's k, Reshape-like shapes) must be known: from_node raises NodeUnsupported otherwise.
    values: list = field(default_factory=list)
    # node input indices that are initializers of the model (its constant weights: ORT prepacks
    # them), as opposed to values given with --data
    constants: set = field(default_factory=set)

    def value(self, index: int):
        """The known array of node input `index`, or None (absent or not known)."""
        return self.values[index] if index < len(self.values) else None

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)


@dataclass
class NodeBinding:
    """How a node maps onto one of our cases: the op sees node input `index` reshaped to the
    shape the op's graph declares for that input (same element count), and writes its output
    into node output `index` reshaped to `shape` (the node's output shape). Op outputs not listed
    are computed into scratch and dropped (the node does not ask for them)."""

    case: Case
    inputs: dict  # op input name -> node input index
    outputs: dict  # op output name -> (node output index, node output shape)


class Op:
    name: str = ""
    # the native entry point pb_<kernel>() this op calls: the ONLY mapping from op to kernel
    # (`perfbench ab` compares each op's kernel declarations in the two headers through it)
    kernel: str = ""
    # its args struct pb_<kernel_args>_args when kernels share one (Add and Mul: "binary");
    # empty: pb_<kernel>_args
    kernel_args: str = ""
    params: tuple = ()  # Param, in id order
    bound = "memory"  # "memory" (GB/s) or "compute" (GFLOP/s)
    # ORT dtype to compare with when ORT has no kernel in the cell's dtype (CONTRACTS §2)
    ort_substitute = {"bf16": "f32", "f16": "f32"}
    floors = numerics.FLOORS
    floor_reason = ""
    mutants: tuple = ()
    # mutant name -> the dtypes where it is a visible bug (a mutant wrong only below a dtype's
    # rounding, e.g. the other Gelu form in f16); a mutant not listed applies in every dtype
    mutant_dtypes: dict = {}
    # The op contract's cases (tests/ops/test_contract.py runs every registered op on each of
    # them, in every dtype, on every ISA path this CPU runs, with 1 and 2 threads): a small,
    # explicit tuple of parameter dicts for make_case. Tiny shapes whose vector axis leaves tails
    # at 4, 8 and 16 lanes (e.g. 1, 5, 9, 17, 33 elements past a multiple of 16), every optional
    # input/output and attribute form the op has, and at least one shape past twice the kernel's
    # per-thread grain so that 2 threads really split the work. Every mutant must apply to one of
    # them. A registered op that declares none fails the contract test.
    test_cases: tuple = ()
    # int64 fields of the kernel's args struct where a negative value is meaningful, not a size
    # (Trilu's diagonal k): the op contract's bad-argument probe (each int64 field = -1) skips them
    kernel_signed_args: tuple = ()
    # pointer fields of the kernel's args struct whose NULL means "absent" (an optional input or
    # output): the op contract lets a NULL there succeed; every other NULL pointer must be refused
    kernel_optional_args: tuple = ()

    # ---- parameters ----
    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def param_names(self) -> list[str]:
        return [p.name for p in self.params]

    def make_case(self, values: dict, where: str = "") -> Case:
        where = where or self.name
        known = self.param_names()
        for k in values:
            if k not in known:
                hint = difflib.get_close_matches(k, known, n=1)
                raise UsageError(
                    f"{where}: {self.name} has no parameter {k!r}"
                    + (f" (did you mean {hint[0]!r}?)" if hint else f"; its parameters: {', '.join(known)}")
                )
        out = []
        for p in self.params:
            if p.name in values:
                v = p.check(values[p.name], where)
            elif p.default is not None:
                v = p.default
            else:
                raise UsageError(f"{where}: {self.name} needs {p.name!r} ({p.help or p.kind.__name__})")
            out.append((p.name, v))
        case = Case(self.name, tuple(out))
        self.validate(case, where)
        cid = case.case_id
        if not set(cid) <= CASE_ID_CHARS or ".." in cid:
            raise UsageError(f"{where}: case id {cid!r} would contain characters outside [A-Za-z0-9_.=-] or '..'")
        nbytes = self.case_bytes(case, outputs=False)
        if nbytes > MAX_CASE_BYTES:
            raise UsageError(f"{where}: case {cid} would allocate {nbytes:,} bytes ({nbytes / 2**30:,.1f} GiB) of "
                             f"inputs at 2 bytes a float, more than the {MAX_CASE_BYTES / 2**30:.0f} GiB a case's "
                             "inputs may take: use a smaller shape")
        return case

    def validate(self, case: Case, where: str) -> None:
        """Cross-parameter checks; raise UsageError."""

    def dim_sizes(self, case: Case) -> dict:
        """The size of each symbolic dimension (a str in a shape) of graph(case)."""
        return {}

    def case_bytes(self, case: Case, outputs: bool = True) -> int:
        """Bytes of the tensors one cell of `case` allocates, floats at the narrowest width we run
        (2 bytes: f16/bf16; an f32 cell takes up to twice this): each input of graph(case) and,
        with `outputs`, each output (an output aliased to an input is that input's buffer,
        counted once; Gather's shared table counts in full), as an exact Python integer.
        make_case refuses a case whose inputs are above MAX_CASE_BYTES."""
        narrowest = min(d.itemsize for d in dtypes.ALL)
        graph, sizes = self.graph(case), self.dim_sizes(case)
        total = sum(self._tensor_bytes(sizes, i[2], i[1], narrowest) for i in graph.inputs if i[0])
        return total + self._output_bytes(case, narrowest, graph, sizes) if outputs else total

    def bytes_written(self, case: Case, dtype: dtypes.DType) -> float:
        """Bytes the op writes per call in `dtype`: its outputs (an output aliased to an input
        counts nothing: what such an op writes into the input, e.g. a KV cache's new rows, is
        small against the cache). Divided by bytes_moved, the write share that places a side's
        bandwidth ceiling between the read and the copy probes (verdicts.bandwidth_ceiling)."""
        return float(self._output_bytes(case, dtype.itemsize, self.graph(case), self.dim_sizes(case)))

    def _output_bytes(self, case: Case, float_size: int, graph: GraphSpec, sizes: dict) -> int:
        aliased = set(self.aliases(case))
        return sum(self._tensor_bytes(sizes, o[1], o[2] if len(o) > 2 else "float", float_size)
                   for o in graph.outputs if o[0] and o[0] not in aliased)

    def _tensor_bytes(self, sizes: dict, shape, typ: str, float_size: int) -> int:
        """Bytes of one tensor of graph(case): symbolic dimensions from `sizes` (dim_sizes()),
        floats at float_size bytes, other element types at their own."""
        dims = []
        for d in shape:
            if isinstance(d, str):
                if d not in sizes:
                    raise RuntimeError(f"op {self.name}: graph dimension {d!r} has no size in dim_sizes()")
                d = sizes[d]
            dims.append(int(d))
        return math.prod(dims) * (float_size if typ == "float" else ELEM_TYPES[typ].itemsize)

    # ---- definition hashes (CONTRACTS §1) ----
    def timing_definition(self, case: Case, dtype: str, ort_dtype: str) -> str:
        """What changes the work measured: op, shapes/attributes, input generator, ORT dtype."""
        payload = {
            "op": self.name,
            "params": case.params,
            "inputs": self.input_generator_version,
            "dtype": dtype,
            "ort_dtype": ort_dtype,
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def numerics_definition(self) -> str:
        payload = {"floors": self.floors, "rms_floor": numerics.RMS_FLOOR_FRACTION, "version": 1}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    input_generator_version = 1

    # ---- to implement per op ----
    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        raise NotImplementedError

    def graph(self, case: Case) -> GraphSpec:
        raise NotImplementedError

    def output_shapes(self, case: Case) -> dict:
        return {o[0]: o[1] for o in self.graph(case).outputs if o[0]}

    def output_dtypes(self, case: Case, np_dtype) -> dict:
        """Per output, its numpy dtype when the cell's float type is `np_dtype`."""
        graph = self.graph(case)
        return {o[0]: (np.dtype(np_dtype) if graph.output_type(o[0]) == "float" else ELEM_TYPES[graph.output_type(o[0])])
                for o in graph.outputs if o[0]}

    def aliases(self, case: Case) -> dict:
        """{output: input} for outputs that ARE an input buffer (a KV cache that past and present
        share): the kernel and ORT write into that input."""
        return {}

    def private_inputs(self, case: Case, inputs: dict) -> dict:
        """The inputs one side may use: aliased buffers copied (that side writes into them),
        the rest shared read-only."""
        al = set(self.aliases(case).values())
        return {k: (v.copy() if k in al else v) for k, v in inputs.items()}

    def new_outputs(self, case: Case, np_dtype, inputs: dict) -> dict:
        """Output buffers for one side: new arrays, except aliased outputs, which are that side's
        own input buffer (pass private_inputs)."""
        al = self.aliases(case)
        types = self.output_dtypes(case, np_dtype)
        return {n: (inputs[al[n]] if n in al else np.empty(s, types[n])) for n, s in self.output_shapes(case).items()}

    def bound_for(self, case: Case) -> str:
        """"memory" (GB/s) or "compute" (GFLOP/s) for this case; "roofline": whichever of the two
        takes this host longer, decided per run from its peaks (verdicts.resolve_bound)."""
        return self.bound

    def compute_peak(self, case: Case, dtype: str) -> str:
        """The peak kind a compute-bound side in `dtype` is divided by: the f32 FMA peak
        ("fma_f32"), since kernels compute in f32 from any storage type; an op whose bf16 kernel
        multiplies bf16 pairs (MatMul's vdpbf16ps path) says "bf16_dot" for bf16."""
        return "fma_f32"

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        """A KernelCall writing into `outputs` (arrays of the cell's dtype) on `device`."""
        raise NotImplementedError

    def oracle(self, case: Case, inputs: dict) -> dict:
        """float64 outputs from float64 inputs."""
        raise NotImplementedError

    def plain_oracle(self, case: Case, inputs: dict) -> dict | None:
        """float64 outputs of the op's stated semantics where `oracle` judges the cell against
        another reference (MatMulNBits accuracy 4: A quantized to int8 first), else None. Errors
        against it are recorded next to the judged ones (err_ours_plain, err_ort_plain); they
        judge nothing."""
        return None

    def oracle_inputs(self, case: Case, inputs: dict) -> dict:
        """What oracle (and the mutants) take: the inputs upcast to float64. An op may keep a large
        read-only input in its own dtype (Gather's embedding table: only the rows it gathers are
        upcast, not 1 GB of table per cell)."""
        return to_f64(inputs)

    def row_sizes(self, case: Case) -> dict:
        """Per output: elements per normalization row (trailing, contiguous)."""
        raise NotImplementedError

    def flops(self, case: Case) -> float:
        return 0.0

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        raise NotImplementedError

    def floor(self, dtype: str) -> float:
        return self.floors[dtype]

    def ort_cannot_run(self, case: Case, dtype: str) -> str:
        """Why ORT cannot run this case in this dtype nor its substitute ("" where it can): the
        op contract then expects ORT to fail, and the gate's tolerance is the floor (CONTRACTS §8)."""
        return ""

    def ort_departure(self, case: Case) -> str:
        """Why ORT is known to depart from the specification on this case ("" where it does not):
        the op contract then expects ORT's status to be `ort-discrepancy` (CONTRACTS §8)."""
        return ""

    # ---- `perfbench node`: one node of a real model onto one of our cases ----
    # (domain, op_type) pairs this op can take, e.g. (("", "Softmax"),)
    node_types: tuple = ()

    def from_node(self, node: NodeInfo) -> NodeBinding:
        """The case (and input/output mapping) that computes exactly this node, honouring its
        opset and attributes. Raise NodeUnsupported (one line: what is missing) for what our
        kernel does not implement, UsageError for a node that is not valid ONNX."""
        raise NodeUnsupported(f"perfbench node does not map {node.domain or 'ai.onnx'}::{node.op_type} onto {self.name} yet")


REGISTRY: dict[str, Op] = {}


def register(cls):
    op = cls()
    if not op.name or op.name in REGISTRY:
        raise RuntimeError(f"op {cls.__name__}: empty or duplicate name {op.name!r}")
    if not op.kernel:
        raise RuntimeError(f"op {cls.__name__}: Op.kernel is empty (name the native entry point pb_<kernel>() "
                           "its prepare_ours calls: `perfbench ab` pairs base and head through it)")
    REGISTRY[op.name] = op
    return cls


def get(name: str) -> Op:
    op = REGISTRY.get(name)
    if op is None:
        for k in REGISTRY:  # case-insensitive convenience
            if k.lower() == str(name).lower():
                return REGISTRY[k]
        hint = difflib.get_close_matches(str(name), list(REGISTRY), n=1)
        raise UsageError(
            f"unknown op {name!r}" + (f" (did you mean {hint[0]!r}?)" if hint else f"; known: {', '.join(REGISTRY)}")
        )
    return op


def to_f64(inputs: dict) -> dict:
    """Float inputs upcast exactly to float64 (integers kept)."""
    floats = {d.numpy for d in dtypes.ALL}
    return {k: (v.astype(np.float64) if v.dtype in floats else v) for k, v in inputs.items()}
