"""The data-movement ops (suites/data_movement.toml: Transpose, Gather, Concat, ScatterND, Trilu)
against REAL ORT sessions: our kernel passes the numerics gate on tiny odd shapes in f32, f16
and bf16 (bit-exact: these ops move bits), every mutant fails it, the K-copy graphs run K
times, every ISA path and thread count gives the same bits, Gather's memory-mapped table is
generated once and shared (never copied by the harness nor by ORT's binding), and from_node maps
real nodes (tricky attributes) onto cases that compute exactly what the node computes."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

from perfbench import dtypes, numerics
from perfbench import ops as ops_pkg
from perfbench.errors import UsageError
from perfbench.ops import _movement as mv
from perfbench.ops import ort as ortlib
from perfbench.ops.base import NodeInfo, NodeUnsupported
from perfbench.timing import protocol

SEED = 20261129
DTYPES = ("f32", "f16", "bf16")
OPS = ("Transpose", "Gather", "Concat", "ScatterND", "Trilu")

# the numerics-only odd shapes of suites/data_movement.toml (and a few more)
CASES = {
    "Transpose": [
        {"shape": "3x33x5x80", "perm": "0231"},
        {"shape": "2x7x3x9", "perm": "0213"},
        {"shape": "33x65", "perm": "10"},
        {"shape": "2x3x1x5x7x3", "perm": "504132"},
        {"shape": "4x1x6x5", "perm": "3120"},
    ],
    "Gather": [
        {"vocab": 1000, "hidden": 33, "seq": 7},
        {"vocab": 50, "hidden": 17, "batch": 2, "seq": 5, "index": "int32", "outer": 3},
        {"vocab": 10, "hidden": 8, "seq": 1},
    ],
    "Concat": [
        {"batch": 2, "heads": 3, "past": 33, "new": 5, "head_size": 80},
        {"heads": 2, "past": 7, "new": 1, "head_size": 9},
    ],
    "ScatterND": [
        {"shape": "2x3x37x80", "k": 3, "updates": 6},
        {"shape": "2x3x37x80", "k": 3, "updates": 30},
        {"shape": "40x7", "k": 1, "updates": 9},
        {"shape": "5x6x7", "k": 2, "updates": 7, "reduction": "add"},
        {"shape": "5x6x7", "k": 3, "updates": 11, "reduction": "max"},
        {"shape": "5x6x7", "k": 1, "updates": 3, "reduction": "mul"},
        {"shape": "5x6x7", "k": 2, "updates": 9, "reduction": "min"},
    ],
    "Trilu": [
        {"batch": 3, "rows": 33, "cols": 65, "upper": 0, "k": -2},
        {"rows": 17, "cols": 9, "upper": 1, "k": 5},
        {"batch": 2, "rows": 8, "cols": 8, "upper": 1, "k": 1},
    ],
}


@functools.cache
def _lib():
    from perfbench.kernels_ffi import load

    return load()


@pytest.fixture(autouse=True)
def _auto_isa():
    _lib().select_isa("auto")
    yield
    _lib().select_isa("auto")


def _reduces(case) -> bool:
    return case.p.get("reduction", "none") != "none"


class Cell:
    """One (op, case, dtype): inputs, the oracle and ORT's real output (None where ORT cannot
    run it: ScatterND's f16/bf16 reductions fail at run time)."""

    def __init__(self, op_name: str, i: int, dtype: str):
        self.op = ops_pkg.get(op_name)
        self.case = self.op.make_case(CASES[op_name][i])
        self.dt = dtypes.get(dtype)
        self.inputs = self.op.make_inputs(self.case, self.dt, np.random.default_rng(SEED))
        self.x64 = self.op.oracle_inputs(self.case, self.inputs)
        self.oracle = self.op.oracle(self.case, self.x64)
        self.rows = self.op.row_sizes(self.case)
        self.floor = self.op.floor(self.dt.name)
        if _reduces(self.case) and dtype != "f32":
            with pytest.raises(Exception, match="not supported with ScatterND"):
                ortlib.run_case(self.op, self.case, self.inputs, self.dt)
            self.ort_dt, self.ort_out = None, None
        else:
            ran = ortlib.run_case(self.op, self.case, self.inputs, self.dt)
            self.ort_dt, self.ort_out = ran[0], ran[2]

    def ours(self, threads: int = 1) -> dict:
        mine = self.op.private_inputs(self.case, self.inputs)
        out = self.op.new_outputs(self.case, self.dt.numpy, mine)
        for a in out.values():  # an element the kernel never writes must show (np.empty may
            a[...] = np.nan     # hand back a buffer that held the right answer)
        self.op.prepare_ours(_lib(), self.case, mine, out, threads).run()
        return out

    def gate(self, outputs: dict) -> numerics.GateResult:
        return numerics.gate(outputs, self.ort_out, self.oracle, self.rows, self.floor)


@functools.cache
def _cell(op_name: str, i: int, dtype: str) -> Cell:
    return Cell(op_name, i, dtype)


def _cell_params():
    return [pytest.param(op, i, dt, id=f"{op}-case{i}-{dt}") for op in OPS for i in range(len(CASES[op])) for dt in DTYPES]


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


# ---- the positive control, with real ORT as the yardstick ---------------------------------------


@pytest.mark.parametrize("op_name, i, dtype", _cell_params())
def test_our_kernel_passes_the_gate(op_name, i, dtype):
    cell = _cell(op_name, i, dtype)
    if cell.ort_dt is not None:
        expected = "f32" if (op_name == "Trilu" and dtype == "bf16") else dtype  # Trilu: no bf16 kernel in ORT
        assert cell.ort_dt.name == expected
    out = cell.ours()
    g = cell.gate(out)
    assert g.ours_ok, f"{cell.case.case_id} {dtype}: {g.describe()}"
    if not _reduces(cell.case):
        # pure data movement: exact, and ORT is exact too
        assert g.err_ours == 0.0 and g.err_ort == 0.0, g.describe()
        for k, v in out.items():
            assert _same_bits(v, np.asarray(cell.oracle[k]).astype(cell.dt.numpy))


# ---- mutants: realistic wrong answers must fail -------------------------------------------------


def _mutant_params():
    out = []
    for name in OPS:
        op = ops_pkg.get(name)
        for dt in DTYPES:
            for m in op.mutants:
                out.append(pytest.param(name, dt, m.name, id=f"{name}-{dt}-{m.name.replace(' ', '_')}"))
    return out


@pytest.mark.parametrize("op_name, dtype, mutant_name", _mutant_params())
def test_mutant_fails_the_gate(op_name, dtype, mutant_name):
    op = ops_pkg.get(op_name)
    mutant = next(m for m in op.mutants if m.name == mutant_name)
    checked, accepted = [], []
    for i in range(len(CASES[op_name])):
        cell = _cell(op_name, i, dtype)
        if not mutant.applies(cell.case):
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            bad = {k: np.asarray(v).astype(cell.dt.numpy).astype(np.float64)
                   for k, v in mutant.outputs(op, cell.case, cell.x64).items()}
        assert set(bad) == set(cell.oracle)
        g = cell.gate(bad)
        checked.append(cell.case.case_id)
        if g.ours_ok or not (g.err_ours > g.tol):
            accepted.append(f"{cell.case.case_id}: {g.describe()}")
    assert checked, "the mutant applies to none of the chosen cases"
    assert not accepted, f"the gate ACCEPTED mutant {mutant_name!r} ({dtype}) on: " + "; ".join(accepted)


@pytest.mark.parametrize("op_name", OPS)
def test_ops_declare_mutants_node_types_and_no_bf16_substitute(op_name):
    op = ops_pkg.get(op_name)
    assert len(op.mutants) >= 2
    assert op.node_types == (("", op_name),)
    # ORT has its own bf16 kernel for all but Trilu: compared head to head
    assert op.ort_substitute == ({"bf16": "f32"} if op_name == "Trilu" else {})
    assert op.bound == "memory"


# ---- the ORT graphs --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("op_name", OPS)
def test_k_copies_execute_k_times(op_name, dtype):
    K = 4
    op = ops_pkg.get(op_name)
    case = op.make_case(CASES[op_name][0])
    dt = dtypes.get(dtype)
    ort_dt = dtypes.get(op.ort_substitute.get(dtype, dtype))
    spec = op.graph(case)
    inputs = ortlib.to_ort_dtype(op.make_inputs(case, dt, np.random.default_rng(3)), ort_dt)
    outputs = {n: np.full(s, np.nan, ort_dt.numpy) for n, s in op.output_shapes(case).items()}
    assert ortlib.count_node_runs(ortlib.build_model(spec, ort_dt, K), 1, inputs, outputs, spec, K) == K
    oracle = op.oracle(case, op.oracle_inputs(case, inputs))
    for name, buf in outputs.items():  # the shared output buffer holds the answer
        assert _same_bits(buf, np.asarray(oracle[name]).astype(ort_dt.numpy))


# ---- every ISA path and thread count: the same bits -------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_isa_paths_and_threads_agree(dtype):
    lib = _lib()
    for name in OPS:
        for i in range(len(CASES[name])):
            cell = _cell(name, i, dtype)
            want = cell.ours(1)
            for isa in lib.isa_supported:
                lib.select_isa(isa)
                for t in (1, 2):
                    got = cell.ours(t)
                    for k in want:
                        assert _same_bits(got[k], want[k]), f"{cell.case.case_id} {dtype} isa={isa} threads={t}"
            lib.select_isa("auto")


def test_large_tiled_transposes_are_exact():
    """Shapes past the 32x32 tiles and the 8x8 register blocks, in every ISA path."""
    lib = _lib()
    from perfbench.kernels_ffi import movement as mvk

    rng = np.random.default_rng(5)
    for dtype in DTYPES:
        dt = dtypes.get(dtype)
        for shape, perm in (((70, 45), (1, 0)), ((2, 37, 3, 41), (0, 2, 3, 1)), ((3, 40, 2, 33), (3, 1, 0, 2))):
            x = rng.standard_normal(shape).astype(dt.numpy)
            want = np.ascontiguousarray(x.transpose(perm))
            for isa in lib.isa_supported:
                lib.select_isa(isa)
                y = np.empty(want.shape, dt.numpy)
                mvk.transpose(lib, x, y, perm, 2).run()
                assert _same_bits(y, want), (dtype, shape, perm, isa)
        lib.select_isa("auto")


# ---- Gather's table: generated once, memory-mapped read-only, never copied -----------------------


@pytest.fixture()
def small_memmap_tables(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(mv, "MEMMAP_MIN_BYTES", 1024)
    return tmp_path


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_table_is_generated_once_and_shared(small_memmap_tables, dtype):
    op = ops_pkg.get("Gather")
    case = op.make_case({"vocab": 300, "hidden": 20, "seq": 9})
    dt = dtypes.get(dtype)
    a = op.make_inputs(case, dt, np.random.default_rng(SEED))
    files = list(small_memmap_tables.iterdir())
    assert len(files) == 1 and files[0].stat().st_size == 300 * 20 * dt.itemsize
    stamp = files[0].stat().st_mtime_ns, files[0].stat().st_ino
    b = op.make_inputs(case, dt, np.random.default_rng(SEED))
    assert (files[0].stat().st_mtime_ns, files[0].stat().st_ino) == stamp  # reused, not rewritten
    assert list(small_memmap_tables.iterdir()) == files
    assert isinstance(a["data"], np.memmap) and not a["data"].flags.writeable
    assert _same_bits(a["data"], b["data"]) and _same_bits(a["indices"], b["indices"])
    # the same bytes as the in-memory generator (small tables), and another seed differs
    mem = mv.table((300, 20), dt, int(np.random.default_rng(SEED).integers(0, 2**63)))
    assert not isinstance(mem, np.memmap) or mem.filename == a["data"].filename
    other = op.make_inputs(case, dt, np.random.default_rng(SEED + 1))
    assert not _same_bits(other["data"], a["data"])
    # the oracle upcasts only what it gathers: the table goes in as it is
    assert op.oracle_inputs(case, a)["data"] is a["data"]
    # nothing copies it: ORT's input binding, the ORT dtype conversion, a replicate's fresh buffers
    assert ortlib.to_ort_dtype(a, dt)["data"] is a["data"]
    assert protocol._fresh_copy(a["data"]) is a["data"]
    assert protocol._fresh_copy(a["indices"]) is not a["indices"]
    assert ortlib.ortvalue(a["data"]).data_ptr() == a["data"].ctypes.data
    # and our kernel and ORT both read it in place and agree with the oracle
    ran = ortlib.run_case(op, case, a, dt)
    mine = op.private_inputs(case, a)
    out = op.new_outputs(case, dt.numpy, mine)
    op.prepare_ours(_lib(), case, mine, out, 2).run()
    oracle = op.oracle(case, op.oracle_inputs(case, a))
    assert _same_bits(out["output"], oracle["output"].astype(dt.numpy))
    assert _same_bits(ran[2]["output"], out["output"])


def test_gather_table_cap(monkeypatch):
    monkeypatch.setattr(mv, "TABLE_CAP_BYTES", 1000)
    op = ops_pkg.get("Gather")
    case = op.make_case({"vocab": 100, "hidden": 8, "seq": 2})  # 3200 bytes in f32
    with pytest.raises(UsageError, match="cap"):
        op.make_inputs(case, dtypes.F32, np.random.default_rng(1))
    node = NodeInfo("Gather", "", 13, {}, [(np.dtype(np.float32), (100, 8)), (np.dtype(np.int64), (2,))], ["y"], "f32")
    with pytest.raises(NodeUnsupported, match="GiB"):
        op.from_node(node)


def test_no_cache_file_left_half_written(small_memmap_tables):
    mv.table((64, 16), dtypes.F16, 7)
    names = [p.name for p in small_memmap_tables.iterdir()]
    assert len(names) == 1 and names[0].endswith(".bin") and not any(n.endswith(".tmp") for n in names)
    assert os.access(small_memmap_tables / names[0], os.R_OK)


# ---- from_node: real nodes onto cases --------------------------------------------------------------


def _node(op_type, inputs, attrs=None, outputs=("y",), values=None, opset=18):
    ins = [None if i is None else (np.dtype(i[0]), tuple(i[1])) for i in inputs]
    floats = [d for d, _ in (i for i in ins if i) if d in (np.float32, np.float16) or d == dtypes.BF16.numpy]
    name = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", dtypes.BF16.numpy: "bf16"}
    return NodeInfo(op_type, "", opset, attrs or {}, ins, list(outputs), name[floats[0]] if floats else None,
                    values or [])


def _run_binding(op, binding, arrays: list, dt=dtypes.F32) -> np.ndarray:
    """Our kernel on the node's own arrays, reshaped to what the case's graph declares."""
    spec = op.graph(binding.case)
    declared = {n: shape for n, _, shape in spec.inputs if n}
    inputs = op.make_inputs(binding.case, dt, np.random.default_rng(0))
    for name, idx in binding.inputs.items():
        inputs[name] = np.ascontiguousarray(arrays[idx]).reshape(declared[name])
    out = op.new_outputs(binding.case, dt.numpy, inputs)
    op.prepare_ours(_lib(), binding.case, inputs, out, 1).run()
    (name, (index, shape)), = binding.outputs.items()
    assert index == 0
    return out[name].reshape(shape)


def test_from_node_transpose():
    op = ops_pkg.get("Transpose")
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5, 1, 2, 3)).astype(np.float32)
    for perm in (None, [6, 0, 5, 1, 4, 2, 3]):  # default perm: axes reversed; a rank-7 permutation
        b = op.from_node(_node("Transpose", [(np.float32, x.shape)], {} if perm is None else {"perm": perm}))
        want = np.transpose(x, perm)
        assert b.outputs == {"y": (0, want.shape)}
        assert _same_bits(_run_binding(op, b, [x]), np.ascontiguousarray(want))
    with pytest.raises(NodeUnsupported, match="int64"):
        op.from_node(_node("Transpose", [(np.int64, (2, 3))]))
    with pytest.raises(NodeUnsupported, match="rank 9"):
        op.from_node(_node("Transpose", [(np.float32, (1,) * 9)]))
    with pytest.raises(UsageError, match="not a permutation"):
        op.from_node(_node("Transpose", [(np.float32, (2, 3))], {"perm": [0, 0]}))
    with pytest.raises(UsageError, match="inputs"):
        op.from_node(_node("Transpose", [(np.float32, (2, 3)), (np.float32, (2, 3))]))


def test_from_node_gather_any_axis():
    op = ops_pkg.get("Gather")
    rng = np.random.default_rng(1)
    data = rng.standard_normal((3, 11, 4, 5)).astype(np.float32)
    for axis, itype in ((-2, np.int32), (1, np.int64), (0, np.int64), (3, np.int32)):
        dim = data.shape[axis]
        idx = rng.integers(-dim, dim, (2, 3)).astype(itype)
        b = op.from_node(_node("Gather", [(np.float32, data.shape), (itype, idx.shape)], {"axis": axis}))
        want = np.take(data, idx, axis=axis)
        assert b.outputs["output"][1] == want.shape
        assert b.case.p["index"] == np.dtype(itype).name
        assert _same_bits(_run_binding(op, b, [data, idx]), want)
    with pytest.raises(UsageError, match="axis=4"):
        op.from_node(_node("Gather", [(np.float32, data.shape), (np.int64, (2,))], {"axis": 4}))
    with pytest.raises(NodeUnsupported, match="empty"):
        op.from_node(_node("Gather", [(np.float32, data.shape), (np.int64, (0,))]))
    with pytest.raises(NodeUnsupported, match="float32"):
        op.from_node(_node("Gather", [(np.int64, (5, 2)), (np.int64, (3,))]))


def test_from_node_concat_any_axis():
    op = ops_pkg.get("Concat")
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    for axis in (-1, 0, 2, -3):
        shape_b = list(a.shape)
        shape_b[axis] = 3
        bb = rng.standard_normal(shape_b).astype(np.float32)
        b = op.from_node(_node("Concat", [(np.float32, a.shape), (np.float32, bb.shape)], {"axis": axis}))
        want = np.concatenate([a, bb], axis=axis)
        assert b.outputs["present"][1] == want.shape
        assert _same_bits(_run_binding(op, b, [a, bb]), want)
    with pytest.raises(NodeUnsupported, match="3 inputs"):
        op.from_node(_node("Concat", [(np.float32, a.shape)] * 3, {"axis": 1}))
    with pytest.raises(UsageError, match="differ off axis"):
        op.from_node(_node("Concat", [(np.float32, (2, 3)), (np.float32, (3, 3))], {"axis": 1}))
    with pytest.raises(UsageError, match="no axis"):
        op.from_node(_node("Concat", [(np.float32, (2, 3)), (np.float32, (2, 3))]))


def test_from_node_scatter_nd_reductions_and_depths():
    op = ops_pkg.get("ScatterND")
    rng = np.random.default_rng(3)
    data = rng.standard_normal((4, 5, 6)).astype(np.float32)
    for reduction, idx in (("none", np.array([[1, -1], [3, 0], [0, 2]])), ("mul", np.array([[2], [2], [-4]])),
                           ("min", np.array([[0, 1, 2], [3, 4, 5]]))):
        idx = idx.astype(np.int64)
        upd = rng.standard_normal(idx.shape[:-1] + data.shape[idx.shape[-1]:]).astype(np.float32)
        b = op.from_node(_node("ScatterND", [(np.float32, data.shape), (np.int64, idx.shape), (np.float32, upd.shape)],
                               {"reduction": reduction}))
        assert b.case.p["reduction"] == reduction and b.case.p["k"] == idx.shape[-1]
        from perfbench.ops._reference import evaluate

        attrs = {} if reduction == "none" else {"reduction": reduction}
        want = evaluate("ScatterND", [data, idx, upd], opset=18, **attrs)[0].astype(np.float32)
        got = _run_binding(op, b, [data, idx, upd])
        if reduction == "none":
            assert _same_bits(got, want)
        else:  # duplicates combine in f32, one rounding per update; the reference in float64
            np.testing.assert_allclose(got, want, rtol=1e-6)
            assert not np.array_equal(got, data)
    with pytest.raises(NodeUnsupported, match="duplicates"):
        op.from_node(_node("ScatterND", [(np.float32, (2, 3)), (np.int64, (3, 1)), (np.float32, (3, 3))]))
    with pytest.raises(UsageError, match="updates must have shape"):
        op.from_node(_node("ScatterND", [(np.float32, (2, 3)), (np.int64, (1, 1)), (np.float32, (1, 2))]))
    with pytest.raises(UsageError, match="reduction"):
        op.from_node(_node("ScatterND", [(np.float32, (2, 3)), (np.int64, (1, 1)), (np.float32, (1, 3))],
                           {"reduction": "avg"}))


def test_from_node_trilu_k_and_upper():
    op = ops_pkg.get("Trilu")
    x = np.random.default_rng(4).standard_normal((2, 3, 6, 7)).astype(np.float32)
    for attrs, k in (({}, None), ({"upper": 0}, np.array(-2)), ({"upper": 1}, np.array(3)),
                     ({"upper": 0}, np.array(2**62))):
        inputs = [(np.float32, x.shape)] + ([] if k is None else [(np.int64, ())])
        b = op.from_node(_node("Trilu", inputs, attrs, values=[None, k]))
        kk = 0 if k is None else int(k)
        want = np.triu(x, kk) if attrs.get("upper", 1) else np.tril(x, kk)
        arrays = [x] + ([] if k is None else [np.asarray(k, np.int64)])
        assert _same_bits(_run_binding(op, b, arrays), want)
    with pytest.raises(NodeUnsupported, match="not known"):
        op.from_node(_node("Trilu", [(np.float32, x.shape), (np.int64, ())]))
    with pytest.raises(UsageError, match="rank >= 2"):
        op.from_node(_node("Trilu", [(np.float32, (5,))]))
    # an absent optional k (empty name) is no k
    b = op.from_node(_node("Trilu", [(np.float32, x.shape), None]))
    assert b.case.p["k"] == 0 and b.inputs == {"x": 0}


NT_SCRIPT = r"""
import numpy as np, ml_dtypes
from perfbench.kernels_ffi import load
from perfbench.kernels_ffi import movement as mvk
lib = load()
rng = np.random.default_rng(9)

def misaligned(shape, dt, shift):
    n = int(np.prod(shape))
    return np.full(n + 8, np.nan, dt)[shift:shift + n].reshape(shape)

for dt in (np.float32, np.float16, ml_dtypes.bfloat16):
    for shift in (0, 1, 3):
        a, b = rng.standard_normal((3, 301, 67)).astype(dt), rng.standard_normal((3, 5, 67)).astype(dt)
        out = misaligned((3, 306, 67), dt, shift)
        mvk.concat(lib, [a, b], out, 1, 2).run()
        assert out.tobytes() == np.concatenate([a, b], 1).tobytes()
        x = rng.standard_normal((4, 9, 300)).astype(dt)
        y = misaligned((9, 4, 300), dt, shift)
        mvk.transpose(lib, x, y, [1, 0, 2], 2).run()
        assert y.tobytes() == np.ascontiguousarray(x.transpose(1, 0, 2)).tobytes()
        t = rng.standard_normal((50, 333)).astype(dt)
        idx = np.array([-1, 0, 49, 7, -50])
        o = misaligned((5, 333), dt, shift)
        mvk.gather(lib, t, idx, o, 0, 2).run()
        assert o.tobytes() == t[idx].tobytes()
        d = rng.standard_normal((2, 40, 129)).astype(dt)
        u = rng.standard_normal((2, 129)).astype(dt)
        o = misaligned(d.shape, dt, shift)
        mvk.scatter_nd(lib, d, np.array([[0, 39], [1, -40]]), u, o, "none", 2).run()
        w = d.copy(); w[0, 39] = u[0]; w[1, 0] = u[1]
        assert o.tobytes() == w.tobytes()
        x = rng.standard_normal((2, 70, 301)).astype(dt)
        y = misaligned(x.shape, dt, shift)
        mvk.trilu(lib, x, y, 0, 100, 2).run()
        assert y.tobytes() == np.tril(x, 100).tobytes()
print("ok")
"""


@pytest.mark.parametrize("nt_bytes", ["1", "0"])
def test_streaming_and_plain_copies_at_any_alignment(nt_bytes):
    """Every output written with non-temporal stores (PERFBENCH_MOVEMENT_NT_BYTES=1) or never
    (0), at odd alignments: the same bits (the threshold is read once per process)."""
    import subprocess
    import sys

    env = dict(os.environ, PERFBENCH_MOVEMENT_NT_BYTES=nt_bytes)
    r = subprocess.run([sys.executable, "-c", NT_SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


# ---- work split across threads: shapes past the per-thread grain ---------------------------------


@pytest.mark.parametrize("op_name,params", [
    ("Transpose", {"shape": "2x96x16x128", "perm": "0213"}),    # 1.5 MB f32: contiguous runs split
    ("Transpose", {"shape": "1x256x12x96", "perm": "0231"}),    # tiles split mid-odometer
    ("Transpose", {"shape": "700x900", "perm": "10"}),
    ("Concat", {"heads": 8, "head_size": 128, "past": 300, "new": 7}),
    ("Trilu", {"rows": 700, "cols": 650, "upper": 0, "k": -3}),
    ("ScatterND", {"shape": "1x8x512x128", "k": 3, "updates": 64}),
])
def test_threads_split_large_work_exactly(op_name, params):
    """Every case here exceeds the 512 KiB a thread takes before another is woken, so 2 and 3
    threads really split it (the small CASES above run on one thread whatever is asked)."""
    op = ops_pkg.get(op_name)
    case = op.make_case(params)
    dt = dtypes.F32
    inputs = op.make_inputs(case, dt, np.random.default_rng(SEED))
    oracle = op.oracle(case, op.oracle_inputs(case, inputs))
    for threads in (1, 2, 3):
        mine = op.private_inputs(case, inputs)
        out = op.new_outputs(case, dt.numpy, mine)
        for a in out.values():
            a[...] = np.nan
        op.prepare_ours(_lib(), case, mine, out, threads).run()
        for k, want in oracle.items():
            assert np.array_equal(out[k].astype(np.float64), want), (op_name, params, threads, k)
