"""Negative controls for the numerics gate (CONTRACTS §8): every mutant of every attention op
(Softmax, RotaryEmbedding, GroupQueryAttention, MultiHeadAttention), in every dtype where it
applies, must FAIL the gate with real ORT as the yardstick; our real kernel must PASS it on the
same cells (positive control); and our rotary kernel fed a bug-inducing argument must fail it too.

Cases: the numerics-only odd shapes and the quick shapes of suites/attention.toml, plus small
representatives of the attention ops' quick shapes. Outputs are allocated as the Harness does
(op.private_inputs / op.new_outputs): in GroupQueryAttention's shared-KV mode, present IS that
side's own copy of the past input buffer, for ours and for ORT alike."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from perfbench import dtypes, numerics
from perfbench import ops as ops_pkg
from perfbench.kernels_ffi import wrappers
from perfbench.ops import ort as ortlib
from perfbench.ops.base import to_f64
from perfbench.ops.group_query_attention import GroupQueryAttention
from perfbench.ops.multi_head_attention import MultiHeadAttention
from perfbench.ops.rotary_embedding import RotaryEmbedding
from perfbench.ops.softmax import Softmax

SEED = 20261129
DTYPES = ("f32", "f16", "bf16")
ORT_THREADS = 1

# suites/attention.toml: numerics-only odd shapes first, then the quick shape
CASES = {
    "Softmax": [
        {"heads": 3, "queries": 1, "keys": 4097},
        {"heads": 3, "queries": 1, "keys": 4105},
        {"batch": 2, "heads": 2, "queries": 3, "keys": 33},
        {"heads": 32, "queries": 1, "keys": 1024},
    ],
    "RotaryEmbedding": [
        {"batch": 2, "seq": 33, "heads": 3, "head_size": 80},
        {"batch": 2, "seq": 5, "heads": 2, "head_size": 80, "layout": "bnsh", "interleaved": 1},
        {"batch": 2, "seq": 7, "heads": 3, "head_size": 36},
        {"batch": 2, "seq": 7, "heads": 3, "head_size": 36, "layout": "bnsh", "interleaved": 1},
        {"seq": 128, "heads": 32, "head_size": 128, "layout": "bsnh", "interleaved": 0},
    ],
    "GroupQueryAttention": [
        {"heads": 8, "kv_heads": 2, "head_size": 80, "past": 4097, "rotary": 1},
        {"heads": 8, "kv_heads": 2, "head_size": 80, "seq": 33, "rotary": 1, "interleaved": 1},
        {"batch": 3, "heads": 4, "kv_heads": 2, "head_size": 64, "past": 300, "ragged": 1, "kv": "shared"},
        {"heads": 4, "kv_heads": 2, "head_size": 64, "past": 9, "seq": 5},
        {"batch": 2, "heads": 4, "kv_heads": 1, "head_size": 32, "seq": 20, "ragged": 1, "rotary": 1},
    ],
    "MultiHeadAttention": [
        {"heads": 3, "head_size": 80, "past": 4097},
        {"batch": 2, "heads": 2, "head_size": 96, "seq": 33, "mask": 1},
        {"heads": 4, "head_size": 64, "past": 130, "mask": 1},
        {"heads": 2, "head_size": 64, "seq": 70},
    ],
}
ATTENTION_OP_TYPES = (Softmax, RotaryEmbedding, GroupQueryAttention, MultiHeadAttention)


def _attention_ops():
    """Registered ops that are one of ATTENTION_OP_TYPES themselves (test-only subclasses that
    another test may have registered are not)."""
    return [op for op in ops_pkg.REGISTRY.values() if type(op) in ATTENTION_OP_TYPES]


def _slug(text: str) -> str:
    return text.replace(" ", "_")


def _mutant_params():
    out = []
    for op in _attention_ops():
        cases = [op.make_case(p) for p in CASES[op.name]]
        for dt in DTYPES:
            for m in op.mutants:
                if any(m.applies(c) for c in cases):
                    out.append(pytest.param(op.name, dt, m.name, id=f"{op.name}-{dt}-{_slug(m.name)}"))
    return out


def _cell_params():
    return [
        pytest.param(op.name, i, dt, id=f"{op.name}-case{i}-{dt}")
        for op in _attention_ops()
        for i in range(len(CASES[op.name]))
        for dt in DTYPES
    ]


class Cell:
    """One (op, case, dtype): inputs, the float64 oracle, ORT's real output (the yardstick)."""

    def __init__(self, op_name: str, case_index: int, dtype: str):
        self.op = ops_pkg.get(op_name)
        self.case = self.op.make_case(CASES[op_name][case_index])
        self.dt = dtypes.get(dtype)
        self.inputs = self.op.make_inputs(self.case, self.dt, np.random.default_rng(SEED))
        self.inputs64 = to_f64(self.inputs)
        self.oracle = self.op.oracle(self.case, self.inputs64)
        self.row_sizes = self.op.row_sizes(self.case)
        self.floor = self.op.floor(self.dt.name)
        self.shapes = self.op.output_shapes(self.case)
        self.ort_dt, self.ort_in, self.ort_out = self._run_ort()

    def _run_ort(self):
        """As the Harness does: the cell's dtype, else the op's declared substitute; ORT gets its
        own copy of any aliased input (shared KV: present is that copy)."""
        ran = ortlib.run_case(self.op, self.case, self.inputs, self.dt, ORT_THREADS)
        if ran is None:
            pytest.fail(f"ORT runs {self.op.name} in none of {[d.name for d in ortlib.dtype_candidates(self.op, self.dt)]}")
        return ran

    def ours(self, threads: int = 1) -> dict:
        """Our kernel on its own copy of aliased inputs (the cell's inputs stay untouched)."""
        return self.ours_with_inputs(threads)[1]

    def ours_with_inputs(self, threads: int = 1) -> tuple[dict, dict]:
        mine = self.op.private_inputs(self.case, self.inputs)
        out = self.op.new_outputs(self.case, self.dt.numpy, mine)
        self.op.prepare_ours(_lib(), self.case, mine, out, threads).run()
        return mine, out

    def as_kernel_output(self, outputs: dict) -> dict:
        """A float64 result stored the way a kernel of the cell's dtype would store it."""
        with np.errstate(over="ignore", invalid="ignore"):
            return {k: np.asarray(v).astype(self.dt.numpy).astype(np.float64) for k, v in outputs.items()}

    def gate(self, outputs: dict) -> numerics.GateResult:
        return numerics.gate(outputs, self.ort_out, self.oracle, self.row_sizes, self.floor)


def _same_bits(a, b) -> bool:
    """Bit-identical arrays (a plain bool: pytest never diffs the megabytes behind it)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@functools.cache
def _lib():
    from perfbench.kernels_ffi import load

    return load()


@functools.cache
def _cell(op_name: str, case_index: int, dtype: str) -> Cell:
    return Cell(op_name, case_index, dtype)


@pytest.fixture(autouse=True)
def _auto_isa():
    """Kernels run on the automatically chosen ISA path, whatever another test left selected."""
    _lib().select_isa("auto")
    yield


# ---- the yardstick and the positive control -------------------------------------------------


@pytest.mark.parametrize("op_name, case_index, dtype", _cell_params())
def test_our_kernel_passes_the_gate(op_name, case_index, dtype):
    cell = _cell(op_name, case_index, dtype)
    expected_ort = {"f32": "f32", "f16": "f16", "bf16": "f32"}[dtype]
    assert cell.ort_dt.name == expected_ort  # ORT has no bf16 kernel here: f32 stands in
    g = cell.gate(cell.ours())
    assert not g.ort_discrepancy, f"ORT itself departs from the oracle: {g.describe()}"
    assert g.err_ort is not None and g.err_ort > 0
    assert g.ours_ok, f"{cell.case.case_id} {dtype}: {g.describe()}"


def _shared_kv_cases():
    op = ops_pkg.get("GroupQueryAttention")
    return [i for i, p in enumerate(CASES[op.name]) if op.make_case(p).p["kv"] == "shared"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_cells_allocate_outputs_as_the_harness_does(dtype):
    """Shared KV mode: each side's present IS its own copy of past (never the cell's inputs,
    never a fresh array); the cell's inputs are left as make_inputs made them."""
    assert _shared_kv_cases(), "no shared-KV GroupQueryAttention case among the chosen cases"
    for i in _shared_kv_cases():
        cell = _cell("GroupQueryAttention", i, dtype)
        pristine = cell.op.make_inputs(cell.case, cell.dt, np.random.default_rng(SEED))
        for name in ("key", "value"):
            assert cell.ort_out[f"present_{name}"] is cell.ort_in[f"past_{name}"]
            assert cell.ort_in[f"past_{name}"] is not cell.inputs[f"past_{name}"]
        mine, out = cell.ours_with_inputs()
        for name in ("key", "value"):
            assert out[f"present_{name}"] is mine[f"past_{name}"]
            assert mine[f"past_{name}"] is not cell.inputs[f"past_{name}"]
        for k, v in pristine.items():
            assert _same_bits(cell.inputs[k], v), f"{k} was written"
        # and the kernel wrote the new rows into its copy (the shared buffer is really written)
        assert not _same_bits(mine["past_key"], pristine["past_key"])


# ---- mutants: realistic wrong answers must fail -----------------------------------------------


@pytest.mark.parametrize("op_name, dtype, mutant_name", _mutant_params())
def test_mutant_fails_the_gate(op_name, dtype, mutant_name):
    op = ops_pkg.get(op_name)
    mutant = next(m for m in op.mutants if m.name == mutant_name)
    checked, accepted = [], []
    for i in range(len(CASES[op_name])):
        cell = _cell(op_name, i, dtype)
        if not mutant.applies(cell.case):
            continue
        out = cell.as_kernel_output(mutant.outputs(op, cell.case, cell.inputs64))
        assert set(out) == set(cell.oracle)
        g = cell.gate(out)
        checked.append(cell.case.case_id)
        if g.ours_ok or not (g.err_ours > g.tol):
            accepted.append(f"{cell.case.case_id}: {g.describe()}")
    assert checked, "the mutant applies to none of the chosen cases"
    assert not accepted, f"the gate ACCEPTED mutant {mutant_name!r} ({dtype}) on: " + "; ".join(accepted)


@pytest.mark.parametrize("op", _attention_ops(), ids=lambda op: op.name)
def test_every_mutant_applies_to_a_chosen_case(op):
    cases = [op.make_case(p) for p in CASES[op.name]]
    assert op.mutants, f"{op.name} declares no mutants"
    for m in op.mutants:
        assert any(m.applies(c) for c in cases), f"{op.name} mutant {m.name!r} applies to no chosen case"


def test_every_applicable_combination_has_its_own_test_id():
    ids = {p.id for p in _mutant_params()}
    expected = {
        f"{op.name}-{dt}-{_slug(m.name)}" for op in _attention_ops() for dt in DTYPES for m in op.mutants
    }
    assert ids == expected
    assert {op.name for op in _attention_ops()} == {
        "Softmax", "RotaryEmbedding", "GroupQueryAttention", "MultiHeadAttention"}


# ---- kernel-level mutants: our kernel with a bug-inducing argument ------------------------------


def _rotary_with(cell: Cell, *, flip_interleaved: bool = False, arange_positions: bool = False) -> dict:
    p = cell.case.p
    x = cell.inputs
    pos = x["position_ids"]
    if arange_positions:
        b, s = pos.shape
        pos = np.ascontiguousarray(np.tile(np.arange(s, dtype=np.int64), (b, 1)))
    out = np.empty(cell.shapes["output"], cell.dt.numpy)
    interleaved = bool(p["interleaved"]) != flip_interleaved
    wrappers.rotary_embedding(_lib(), x["input"], pos, x["cos_cache"], x["sin_cache"], out,
                              interleaved=interleaved, num_heads=p["heads"], threads=1).run()
    return {"output": out}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bug", ["interleaved-flipped", "positions-arange"])
def test_rotary_kernel_fed_a_wrong_argument_fails_the_gate(bug, dtype):
    for i in range(len(CASES["RotaryEmbedding"])):
        cell = _cell("RotaryEmbedding", i, dtype)
        kw = {"flip_interleaved": True} if bug == "interleaved-flipped" else {"arange_positions": True}
        g = cell.gate(_rotary_with(cell, **kw))
        assert not g.ours_ok, f"{cell.case.case_id} {dtype}: the gate accepted {bug}: {g.describe()}"
        # the same call without the bug passes (the rejection is the argument's doing)
        assert cell.gate(_rotary_with(cell)).ours_ok
