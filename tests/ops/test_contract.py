"""The op contract: ONE parametrized test over every registered op x dtype x the test cases its
op file declares (Op.test_cases). A new op is tested the moment it registers. Per cell, each check
is its own subtest:

* gate: our kernel passes the numerics gate (CONTRACTS §8, real ORT as the yardstick) on every
  ISA path this CPU runs, with 1 and 2 threads (an op-level check asserts that some declared
  case really splits over 2 threads);
  ORT itself departs from the oracle exactly where the op says it does (Op.ort_departure); ORT
  runs f32 and f16 cells in their own dtype, bf16 in bf16 or f32;
* mutants: every mutant that applies to the case (and is visible in the dtype, Op.mutant_dtypes)
  is rejected by the gate;
* kernel: prepare_ours calls the kernel Op.kernel names with the pb_<kernel_args>_args struct;
* bad-args: the raw C call, with one field of the args struct the op's prepare_ours built
  corrupted (threads 0, an unknown device, an unknown dtype, each non-NULL pointer NULL in turn,
  each int64 size or shape field -1), returns an error status with a fresh message and writes
  nothing (every output buffer keeps its bytes); a NULL pointer may succeed only in a field the
  op declares optional (Op.kernel_optional_args: an input or output left out), and a size field the
  kernel ignores for this case (a mask stride without a mask) may leave the result unchanged;
* ort-copies: the K-copy ORT graph executes every node of the 1-copy graph K times (inserted
  Casts and function bodies included) into the one shared output buffer, which holds the answer;
* from-node: for ops that declare node types, the single-node model of the case (the one
  `perfbench repro` writes) with the case's inputs as data, loaded the way `perfbench node` loads
  it (perfbench.node.load, node_info), maps back through op.from_node onto the same case.

The op-level checks below assert that every registered op declares test cases, that each mutant
applies somewhere, and the exact list of ops whose node mapping is still missing."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from perfbench import dtypes, numerics
from perfbench import node as node_mod
from perfbench import ops as ops_pkg
from perfbench.ops import ort as ortlib
from tests.conftest import isas_to_test
from tests.helpers import DTYPES, Cell, library, mutant_applies_in

pytestmark = pytest.mark.usefixtures("auto_isa")

K = 3
SENTINEL = 0x5A  # the byte every output holds before a call that must write nothing
# ops whose node mapping (from_node) does not exist yet: a new mapping must remove its op here
NO_NODE_MAPPING = {"GroupQueryAttention", "MultiHeadAttention", "RotaryEmbedding"}
# (op_type, domain) of those, so the list means com.microsoft's RotaryEmbedding
NO_NODE_MAPPING_TYPES = {("com.microsoft", "GroupQueryAttention"), ("com.microsoft", "MultiHeadAttention"),
                         ("com.microsoft", "RotaryEmbedding")}


def contract_ops() -> list:
    """Every op the perfbench.ops package registers (test-only ops registered from tests/ are not
    op files and are left out)."""
    return [op for op in ops_pkg.REGISTRY.values() if type(op).__module__.startswith("perfbench.ops.")]


def _grid():
    return [pytest.param(op.name, i, dt, id=f"{op.make_case(p).case_id}-{dt}")
            for op in contract_ops() for i, p in enumerate(op.test_cases) for dt in DTYPES]


@functools.lru_cache(maxsize=4)
def _cell(op_name: str, i: int, dtype: str) -> Cell:
    return Cell(op_name, ops_pkg.get(op_name).test_cases[i], dtype)


@pytest.mark.parametrize("op_name, i, dtype", _grid())
def test_op_contract(lib, subtests, op_name, i, dtype):
    cell = _cell(op_name, i, dtype)
    with subtests.test("gate"):
        _check_gate(lib, cell)
    with subtests.test("mutants"):
        _check_mutants(cell)
    with subtests.test("kernel"):
        _check_kernel(lib, cell)
    with subtests.test("bad-args"):
        _check_bad_args(lib, cell)
    if not cell.op.ort_cannot_run(cell.case, dtype):  # else nothing of ORT's to count (the gate checked it fails)
        with subtests.test("ort-copies"):
            _check_ort_copies(cell.op.name, i, cell.ort_dt.name if cell.ort_dt else None)
    if cell.op.node_types:
        with subtests.test("from-node"):
            _check_from_node(cell)


# ---- gate ---------------------------------------------------------------------------------------


def _check_gate(lib, cell: Cell) -> None:
    cannot = cell.op.ort_cannot_run(cell.case, cell.dt.name)
    if cannot:  # the op says ORT cannot run it: it really cannot (and tol = floor)
        assert cell.ort_dt is None, f"the op says {cannot!r}, but ORT ran it"
    else:
        assert cell.ort_dt is not None, f"ORT runs {cell.case.case_id} in none of its candidate dtypes"
    want = {"f32": {"f32"}, "f16": {"f16"}, "bf16": {"bf16", "f32"}}[cell.dt.name]
    assert cannot or cell.ort_dt.name in want, f"ORT ran the {cell.dt.name} cell in {cell.ort_dt.name}"
    failed = []
    try:
        for isa in isas_to_test(lib):
            lib.select_isa(isa)
            assert lib.isa_active == isa, (lib.isa_active, isa)
            for threads in (1, 2):
                g = cell.gate(cell.ours(lib, threads))
                departs = cell.op.ort_departure(cell.case)
                assert g.ort_discrepancy == bool(departs), f"ORT discrepancy {g.ort_discrepancy}, expected " \
                    f"{bool(departs)} ({departs or 'ORT should agree with the oracle'}): {g.describe()}"
                if not g.ours_ok:
                    failed.append(f"{isa} threads={threads}: {g.describe()}")
    finally:
        lib.select_isa("auto")
    assert not failed, f"{cell.case.case_id} {cell.dt.name} fails the gate on " + "; ".join(failed)


# ---- mutants ------------------------------------------------------------------------------------


def _check_mutants(cell: Cell) -> None:
    accepted = []
    for m in cell.op.mutants:
        if not (m.applies(cell.case) and mutant_applies_in(cell.op, m, cell.dt.name)):
            continue
        out = cell.mutant_output(m)
        assert set(out) == set(cell.oracle), m.name
        g = cell.gate(out)
        if g.ours_ok or not (g.err_ours > g.tol):
            accepted.append(f"{m.name!r}: {g.describe()}")
    assert not accepted, f"the gate ACCEPTED on {cell.case.case_id} {cell.dt.name}: " + "; ".join(accepted)


# ---- bad arguments through C --------------------------------------------------------------------


def _probes(ffi, args, outputs: list, signed: tuple = (), optional: tuple = ()) -> list:
    """(label, apply, undo, may_pass) per corruption of the args struct: generic over every kernel
    (every struct starts with a pb_exec; sizes are int64 fields). Every non-NULL pointer is set to
    NULL in turn and must be refused, except the fields the op declares optional
    (Op.kernel_optional_args: NULL means "absent", may_pass); a pointer into `outputs[0]` (the
    op's first output) is told apart by address (cffi drops `const` from field types, so
    constness cannot tell inputs from outputs) and must exist."""
    out = []

    def field(holder, name, value, label, may_pass=False):
        old = getattr(holder, name)

        def apply():
            setattr(holder, name, value)

        def undo():
            setattr(holder, name, old)
        out.append((label, apply, undo, may_pass))

    field(args.exec, "num_threads", 0, "exec.num_threads=0")
    field(args.exec, "num_threads", -3, "exec.num_threads=-3")
    field(args.exec, "device", 99, "exec.device=99")
    fields = ffi.typeof(args).item.fields
    names = [n for n, _ in fields]
    if "dtype" in names:
        field(args, "dtype", 3, "dtype=3 (not f32/f16/bf16)")
    ranges = [(a.ctypes.data, a.ctypes.data + max(a.nbytes, 1)) for a in outputs]
    primary = []
    for n, f in fields:
        if f.type.kind != "pointer" or getattr(args, n) == ffi.NULL:
            continue
        addr = int(ffi.cast("uintptr_t", getattr(args, n)))
        if ranges[0][0] <= addr < ranges[0][1]:
            primary.append(n)
            field(args, n, ffi.NULL, f"{n}=NULL (the first output)")
        elif any(lo <= addr < hi for lo, hi in ranges):
            field(args, n, ffi.NULL, f"{n}=NULL (an output)", may_pass=n in optional)
        else:
            field(args, n, ffi.NULL, f"{n}=NULL (an input)", may_pass=n in optional)
    assert primary, "no pointer of the args struct points into the op's first output"
    for n, f in fields:
        if n in signed:
            continue
        if f.type.kind == "primitive" and f.type.cname == "int64_t":
            field(args, n, -1, f"{n}=-1")
        elif f.type.kind == "array" and f.type.item.cname == "int64_t":
            arr = getattr(args, n)
            old = arr[0]

            def apply(arr=arr):
                arr[0] = -1

            def undo(arr=arr, old=old):
                arr[0] = old
            out.append((f"{n}[0]=-1", apply, undo, False))
    return out


def _check_kernel(lib, cell: Cell) -> None:
    """The kernel prepare_ours calls is the one Op.kernel names, with the struct Op.kernel_args
    names: `perfbench ab` compares exactly those declarations of the two headers."""
    mine = cell.op.private_inputs(cell.case, cell.inputs)
    call = cell.op.prepare_ours(lib, cell.case, mine, cell.op.new_outputs(cell.case, cell.dt.numpy, mine), 1)
    assert call.kernel == cell.op.kernel, (call.kernel, cell.op.kernel)
    struct = f"pb_{cell.op.kernel_args or cell.op.kernel}_args *"
    assert lib.ffi.typeof(call.args).cname == struct, (lib.ffi.typeof(call.args).cname, struct)


def _check_bad_args(lib, cell: Cell) -> None:
    ffi = lib.ffi
    mine = cell.op.private_inputs(cell.case, cell.inputs)
    out = cell.op.new_outputs(cell.case, cell.dt.numpy, mine)
    call = cell.op.prepare_ours(lib, cell.case, mine, out, 2)
    fn = getattr(lib.lib, "pb_" + call.kernel)
    buffers = list(out.values()) + [v for v in mine.values() if any(v is o for o in out.values())]

    def fill():
        for b in buffers:
            b.view(np.uint8)[...] = SENTINEL

    # the clean call (what a field the kernel ignores must leave unchanged)
    fill()
    assert fn(call.args) == 0, ffi.string(lib.lib.pb_last_error()).decode()
    clean = [b.tobytes() for b in buffers]
    bad = []
    for label, apply, undo, may_pass in _probes(ffi, call.args, list(out.values()), cell.op.kernel_signed_args,
                                                 cell.op.kernel_optional_args):
        fill()
        lib.lib.pb_clear_error()  # a status without a fresh message must show
        apply()
        try:
            status = int(fn(call.args))
        finally:
            undo()
        msg = ffi.string(lib.lib.pb_last_error()).decode(errors="replace")
        if status == 0:
            if label.endswith("=-1") and [b.tobytes() for b in buffers] == clean:
                continue  # a field this case does not use (a mask stride without a mask)
            if may_pass:
                continue  # an optional input or output left out
            bad.append(f"{label}: status 0")
        elif status not in (1, 2) or not msg:
            bad.append(f"{label}: status {status}, message {msg!r}")
        elif any((b.view(np.uint8) != SENTINEL).any() for b in buffers):
            bad.append(f"{label}: status {status} but an output was written")
    assert not bad, f"{call.kernel} on {cell.case.case_id} {cell.dt.name}: " + "; ".join(bad)


# ---- K ORT copies execute K times ----------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _check_ort_copies(op_name: str, i: int, ort_dtype: str | None) -> None:
    """Once per (case, ORT dtype): a bf16 cell that ORT runs in f32 is the f32 cell's check."""
    assert ort_dtype is not None
    op = ops_pkg.get(op_name)
    case = op.make_case(op.test_cases[i])
    dt = dtypes.get(ort_dtype)
    spec = op.graph(case)
    inputs = op.private_inputs(case, op.make_inputs(case, dt, np.random.default_rng(7)))
    outs = op.new_outputs(case, dt.numpy, inputs)
    for a in outs.values():
        if not any(a is v for v in inputs.values()):
            a[...] = np.nan
    one = ortlib.node_runs(ortlib.build_model(spec, dt, 1, values=ortlib.initializer_values(spec, inputs)), 1, inputs,
                           outs, spec, 1)
    inputs = op.private_inputs(case, op.make_inputs(case, dt, np.random.default_rng(7)))
    outs = op.new_outputs(case, dt.numpy, inputs)
    for a in outs.values():
        if not any(a is v for v in inputs.values()):
            a[...] = np.nan
    many = ortlib.node_runs(ortlib.build_model(spec, dt, K, values=ortlib.initializer_values(spec, inputs)), 1, inputs,
                            outs, spec, K)
    assert one and sum(one.values()) >= 1, f"the 1-copy graph ran no node: {one}"
    assert many == {k: K * v for k, v in one.items()}, f"1 copy ran {one}, {K} copies ran {many}"
    # every copy wrote the one shared buffer (K copies in place on a shared KV cache write the
    # same rows K times): it holds the answer
    oracle = op.oracle(case, op.oracle_inputs(case, op.make_inputs(case, dt, np.random.default_rng(7))))
    if not op.ort_departure(case):
        rows = op.row_sizes(case)
        for name, buf in outs.items():
            e = numerics.error(buf, oracle[name], rows[name])
            assert e <= 10 * op.floor(dt.name), f"{name} after {K} copies: err {e:.3g}"


# ---- from_node round trip ------------------------------------------------------------------------


def _tensor(arr: np.ndarray, name: str) -> onnx.TensorProto:
    arr = np.array(arr, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
    if arr.dtype == dtypes.BF16.numpy:
        code = dtypes.BF16.onnx
    else:
        code = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
    t = onnx.TensorProto(name=name, data_type=code, dims=list(arr.shape))
    t.raw_data = arr.tobytes()
    return t


def _check_from_node(cell: Cell) -> None:
    op, case = cell.op, cell.case
    spec = op.graph(case)
    assert (spec.domain, spec.op_type) in op.node_types, f"{op.name}'s own graph is not one of its node_types"
    with tempfile.TemporaryDirectory(prefix="perfbench-contract-") as d:
        model = Path(d) / "node.onnx"
        model.write_bytes(ortlib.build_model(spec, cell.dt, 1, plain_names=True,
                                             values=ortlib.initializer_values(spec, cell.inputs)))
        data = Path(d) / "data"
        data.mkdir()
        names = [n for n, _, _ in spec.inputs if n and n not in spec.initializers]  # initializers: in the model
        for k, name in enumerate(names):
            (data / f"input_{k}.pb").write_bytes(_tensor(cell.inputs[name], name).SerializeToString())
        prob = node_mod.load(str(model), data=str(data))
        info = node_mod.node_info(prob)
    assert info.dtype == cell.dt.name
    binding = op.from_node(info)
    node_inputs = [n for n, _, _ in spec.inputs]
    node_outputs = [o[0] for o in spec.outputs]
    shapes = op.output_shapes(case)
    for idx, shape in binding.outputs.values():
        assert tuple(shape) == tuple(shapes[node_outputs[idx]]), f"output {idx} shape {shape}"
    assert set(binding.inputs) == {n for n in node_inputs if n}, \
        f"from_node binds inputs {sorted(binding.inputs)} of {sorted(n for n in node_inputs if n)}"
    assert set(binding.outputs) <= {n for n in node_outputs if n} and binding.outputs, binding.outputs
    if binding.case == case:
        for name, idx in binding.inputs.items():
            assert node_inputs[idx] == name, (name, idx)
        for name, (idx, _) in binding.outputs.items():
            assert node_outputs[idx] == name, (name, idx)
        return
    # an equivalent case (rows merged, a float attribute rounded to float32, a cache length read
    # off the data): fed the node's arrays as `perfbench node` feeds them, it computes the same bits
    bspec = op.graph(binding.case)
    bshapes = {n: s for n, _, s in bspec.inputs if n}
    mine = op.make_inputs(binding.case, cell.dt, np.random.default_rng(1))
    for name, idx in binding.inputs.items():
        mine[name] = np.array(cell.inputs[node_inputs[idx]], order="C").reshape(bshapes[name])
    out = op.new_outputs(binding.case, cell.dt.numpy, mine)
    op.prepare_ours(library(), binding.case, mine, out, 1).run()
    want = cell.ours(library(), 1)
    for name, (idx, shape) in binding.outputs.items():
        got = out[name].reshape(shape)
        ref = want[node_outputs[idx]].reshape(shape)
        assert got.tobytes() == ref.tobytes(), \
            f"from_node mapped {case.case_id} onto {binding.case.case_id}, which computes output {idx} differently"


# ---- op-level checks -------------------------------------------------------------------------------


@pytest.mark.parametrize("op", contract_ops(), ids=lambda op: op.name)
def test_every_op_declares_test_cases_and_its_mutants_apply(op):
    assert op.test_cases, f"{op.name} declares no test_cases (Op.test_cases in its op file)"
    assert "test_cases" in vars(type(op)), f"{op.name} inherits its test_cases: declare its own in {type(op).__module__}"
    cases = [op.make_case(p) for p in op.test_cases]
    assert len({c.case_id for c in cases}) == len(cases), "duplicate test cases"
    assert len(op.mutants) >= 3, f"{op.name} declares {len(op.mutants)} mutants; the contract wants at least 3"
    for m in op.mutants:
        assert any(m.applies(c) for c in cases), f"mutant {m.name!r} applies to none of the test cases"
        assert any(mutant_applies_in(op, m, dt) for dt in DTYPES), f"mutant {m.name!r} is visible in no dtype"
    for name in op.mutant_dtypes:
        assert name in {m.name for m in op.mutants}, f"mutant_dtypes names an unknown mutant {name!r}"


@pytest.mark.parametrize("op", contract_ops(), ids=lambda op: op.name)
def test_some_test_case_really_splits_over_two_threads(lib, op):
    """The 2-thread gate means something only if a case's work passes 2 x the kernel's grain: at
    least one declared case must run a parallel region on more than one thread."""
    split = []
    for p in op.test_cases:
        c = Cell(op.name, p, "f32")
        before = lib.lib.pb_pool_multi_regions()
        c.ours(lib, 2)
        if lib.lib.pb_pool_multi_regions() > before:
            split.append(c.case.case_id)
    assert split, f"no test case of {op.name} runs on 2 threads (each stays under the kernel's grain): add one"


def test_ops_without_a_node_mapping_are_exactly_these():
    """A new from_node mapping must update NO_NODE_MAPPING (and then the round trip runs)."""
    missing = {op.name for op in contract_ops() if not op.node_types}
    assert missing == NO_NODE_MAPPING
    by_name = {op.name: op for op in contract_ops()}
    assert {(by_name[n].graph(by_name[n].make_case(by_name[n].test_cases[0])).domain,
             by_name[n].graph(by_name[n].make_case(by_name[n].test_cases[0])).op_type)
            for n in NO_NODE_MAPPING} == NO_NODE_MAPPING_TYPES


def test_the_grid_covers_every_op_and_dtype():
    ids = {(p.values[0], p.values[2]) for p in _grid()}
    assert ids == {(op.name, dt) for op in contract_ops() for dt in DTYPES}
    assert {"Softmax", "Add", "LayerNormalization", "Transpose", "OnnxAttention"} <= {op.name for op in contract_ops()}


def test_every_isa_path_this_cpu_runs_is_tested():
    """The paths the gate runs on are every path this CPU can run, judged independently of the
    library (its own detection could miss one): the portable ones always, AVX2 and AVX-512 when
    /proc/cpuinfo lists what they need and the library compiled them in."""
    lib = library()
    supported = isas_to_test(lib)
    assert "portable" in supported and "portable16" in supported
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((set(ln.split(":", 1)[1].split()) for ln in f if ln.startswith("flags")), set())
    except OSError:
        flags = set()
    if not flags:
        pytest.skip("no /proc/cpuinfo flags to check against")
    needs = {"avx2": {"avx2", "fma", "f16c"},
             "avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "fma", "f16c"}}
    for isa, want in needs.items():
        if isa in lib.isa_compiled and want <= flags:
            assert isa in supported, f"this CPU has {sorted(want)} but the {isa} path is not tested"
