"""The data-movement suite (suites/data_movement.toml: Transpose, Gather, Concat, ScatterND, Trilu)
as a group, against REAL ORT sessions, beyond the op contract (tests/ops/test_contract.py: gate,
mutants, bad arguments, K copies, from_node round trip); per-op tests are in tests/ops/test_<op>.py:
ours and ORT are bit-exact on the test cases in f32, f16 and bf16 (these ops move bits), the
K-copy graphs write exact bits, every ISA path and thread count gives the same bits, streaming and
plain copies agree at any alignment, threads split large work exactly."""

from __future__ import annotations

import os

import numpy as np
import pytest

from perfbench import dtypes
from perfbench import ops as ops_pkg
from perfbench.ops import ort as ortlib
from tests.helpers import cell, library, same_bits

SEED = 20261129
DTYPES = ("f32", "f16", "bf16")
OPS = ("Transpose", "Gather", "Concat", "ScatterND", "Trilu")

# the numerics-only odd shapes of suites/data_movement.toml (and a few more)
pytestmark = pytest.mark.usefixtures("auto_isa")


def _cell(op_name: str, i: int, dtype: str):
    """The op's i-th contract test case as a (cached) Cell (ORT's output None where the op says
    ORT cannot run it: ScatterND's f16/bf16 reductions fail at run time)."""
    return cell(op_name, ops_pkg.get(op_name).test_cases[i], dtype, seed=SEED)


def _reduces(case) -> bool:
    return case.p.get("reduction", "none") != "none"


# ---- the positive control, with real ORT as the yardstick ---------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op_name", OPS)
def test_pure_data_movement_is_bit_exact(op_name, dtype):
    """Beyond the gate (the op contract's): moving bits is exact, ours and ORT's alike."""
    for i in range(len(ops_pkg.get(op_name).test_cases)):
        cell = _cell(op_name, i, dtype)
        if cell.ort_dt is not None:
            expected = "f32" if (op_name == "Trilu" and dtype == "bf16") else dtype  # Trilu: no bf16 kernel in ORT
            assert cell.ort_dt.name == expected
        out = cell.ours(library())
        g = cell.gate(out)
        assert g.ours_ok, f"{cell.case.case_id} {dtype}: {g.describe()}"
        if not _reduces(cell.case):
            # pure data movement: exact, and ORT is exact too
            assert g.err_ours == 0.0 and g.err_ort == 0.0, g.describe()
            for k, v in out.items():
                assert same_bits(v, np.asarray(cell.oracle[k]).astype(cell.dt.numpy))


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
    case = op.make_case(ops_pkg.get(op_name).test_cases[0])
    dt = dtypes.get(dtype)
    ort_dt = dtypes.get(op.ort_substitute.get(dtype, dtype))
    spec = op.graph(case)
    inputs = ortlib.to_ort_dtype(op.make_inputs(case, dt, np.random.default_rng(3)), ort_dt)
    outputs = {n: np.full(s, np.nan, ort_dt.numpy) for n, s in op.output_shapes(case).items()}
    assert ortlib.count_node_runs(ortlib.build_model(spec, ort_dt, K), 1, inputs, outputs, spec, K) == K
    oracle = op.oracle(case, op.oracle_inputs(case, inputs))
    for name, buf in outputs.items():  # the shared output buffer holds the answer
        assert same_bits(buf, np.asarray(oracle[name]).astype(ort_dt.numpy))


# ---- every ISA path and thread count: the same bits -------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_isa_paths_and_threads_agree(dtype):
    lib = library()
    for name in OPS:
        for i in range(len(ops_pkg.get(name).test_cases)):
            cell = _cell(name, i, dtype)
            want = cell.ours(library(), 1)
            for isa in lib.isa_supported:
                lib.select_isa(isa)
                for t in (1, 2):
                    got = cell.ours(library(), t)
                    for k in want:
                        assert same_bits(got[k], want[k]), f"{cell.case.case_id} {dtype} isa={isa} threads={t}"
            lib.select_isa("auto")


# ---- Gather's table: generated once, memory-mapped read-only, never copied -----------------------


# ---- from_node: real nodes onto cases --------------------------------------------------------------


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


@pytest.mark.parametrize("llc_bytes", ["3", str(1 << 40)])
def test_streaming_and_plain_copies_at_any_alignment(llc_bytes):
    """Every output written with non-temporal stores (a last-level cache of 3 bytes: anything
    past a third of it streams) or never (2^40 bytes), at odd alignments: the same bits
    (PERFBENCH_LLC_BYTES reaches the library when it is loaded)."""
    import subprocess
    import sys

    env = dict(os.environ, PERFBENCH_LLC_BYTES=llc_bytes)
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
    threads really split it (most test cases run on one thread whatever is asked)."""
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
        op.prepare_ours(library(), case, mine, out, threads).run()
        for k, want in oracle.items():
            assert np.array_equal(out[k].astype(np.float64), want), (op_name, params, threads, k)


@pytest.mark.parametrize("p", [
    {"batch": 2, "rows": 8, "cols": 8, "upper": 1, "k": 1},  # a causal mask: 28 of 64 kept a matrix
    {"batch": 1, "rows": 33, "cols": 65, "upper": 0, "k": -2},
    {"batch": 3, "rows": 5, "cols": 7, "upper": 1, "k": -100},  # everything kept
    {"batch": 1, "rows": 5, "cols": 7, "upper": 0, "k": -100},  # nothing kept
])
def test_trilu_counts_only_the_kept_triangle_read(p):
    """Trilu must read the kept elements and write every one: its bytes are kept + all, the kept
    count being that of numpy's own triangle of ones (an independent count)."""
    from perfbench.ops import trilu

    op = ops_pkg.get("Trilu")
    case = op.make_case(p, "test")
    ones = np.ones((p["rows"], p["cols"]))
    kept = int((np.triu(ones, p["k"]) if p["upper"] else np.tril(ones, p["k"])).sum()) * p["batch"]
    assert trilu.kept_elements(case) == kept
    total = p["batch"] * p["rows"] * p["cols"]
    assert op.bytes_moved(case, dtypes.get("f16")) == (kept + total) * 2
