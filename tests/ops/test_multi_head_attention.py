"""MultiHeadAttention beyond the op contract (tests/ops/test_contract.py): the Python wrapper
rejects bad arguments with UsageError before C is called; the Harness's numerics-only pass reports
the ORT paths the suite relies on. (Running out of scratch memory is a status for MHA as for GQA:
tests/ops/test_group_query_attention.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from perfbench.errors import UsageError
from perfbench.kernels_ffi import wrappers
from perfbench.timing.protocol import CellSpec, Harness
from tests.helpers import cell

pytestmark = pytest.mark.usefixtures("auto_isa")

MHA = "MultiHeadAttention"
SEED = 20261207
SENTINEL = 7.0
MHA_CASES = {
    "decode-past": {"heads": 3, "head_size": 40, "past": 37},
}
HARNESS_MHA = [["heads", 2], ["head_size", 16], ["past", 12], ["mask", 1]]


def _cell(op_name: str, label: str, dtype: str):
    return cell(op_name, MHA_CASES[label], dtype, seed=SEED, fill=SENTINEL)


@pytest.mark.parametrize("params, dtype, ort_dt, path", [
    pytest.param(HARNESS_MHA, "f32", "f32", "kernel", id="MHA-f32"),
    pytest.param(HARNESS_MHA, "f16", "f16", "casts", id="MHA-f16"),
    pytest.param(HARNESS_MHA, "bf16", "f32", "substituted", id="MHA-bf16"),
])
def test_harness_numerics_only_cell(lib, params, dtype, ort_dt, path):
    spec = CellSpec(op=MHA, params=params, dtype=dtype, threads=1, numerics_only=True)
    out = Harness(lib).measure(spec)
    assert out.ours_status == "ok", out.ours_message
    assert out.ort_status == "ok", out.ort_message
    assert out.ort_path == path, out.ort_ops
    assert out.ort_dtype == ort_dt
    assert out.err_ours is not None and out.err_ours <= out.tol
    assert out.ours_ns == [] and out.ort_ns == []  # numerics only: nothing timed


def _mha_args(label: str = "decode-past") -> dict:
    cell = _cell(MHA, label, "f32")
    x = cell.inputs
    out = cell.op.new_outputs(cell.case, np.float32, x)
    out["output"][...] = SENTINEL
    return dict(query=x["query"], key=x["key"], value=x["value"], output=out["output"],
                num_heads=cell.case.p["heads"], key_padding_mask=x.get("key_padding_mask"),
                past_key=x.get("past_key"), past_value=x.get("past_value"), present_key=out.get("present_key"),
                present_value=out.get("present_value"))


MHA_BAD = {
    "past-without-present": (dict(present_key=None, present_value=None), "past_key needs present_key"),
    "present-key-without-value": (dict(present_value=None), "present_key with present_value"),
    "present-wrong-length": (dict(present_key=np.zeros((1, 3, 37, 40), np.float32),
                                  present_value=np.zeros((1, 3, 37, 40), np.float32)), "present_key must have shape"),
    "mask-wrong-length": (dict(key_padding_mask=np.ones((1, 37), np.int32)), "key_padding_mask must be int32"),
    "mask-int64": (dict(key_padding_mask=np.ones((1, 38), np.int64)), "key_padding_mask must be int32"),
    "heads-not-dividing": (dict(num_heads=7), "num_heads=7"),
    "unidirectional-2": (dict(unidirectional=2), "unidirectional must be 0 or 1"),
    "scale-nan": (dict(scale=float("nan")), "scale=nan"),
}


@pytest.mark.parametrize("case", list(MHA_BAD))
def test_mha_wrapper_rejects(lib, case):
    a = _mha_args()
    change, words = MHA_BAD[case]
    a.update(change)
    with pytest.raises(UsageError) as ei:
        wrappers.multi_head_attention(lib, **a)
    assert words in str(ei.value), str(ei.value)
    assert np.all(a["output"] == SENTINEL)


def test_mha_wrapper_baseline_arguments_are_valid(lib):
    a = _mha_args()
    wrappers.multi_head_attention(lib, **a).run()
    assert np.isfinite(a["output"]).all() and not np.any(a["output"] == SENTINEL)
