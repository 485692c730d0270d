"""Upper bounds on cases (issue 25): parameters have maximums where one is natural, every case's
tensors are capped at MAX_CASE_BYTES (the same 4 GiB as `perfbench node`'s generated inputs), and
sizes are exact Python integers (an int64 product wrapped 2**32 x 2**32 to 0)."""

from __future__ import annotations

import numpy as np
import pytest

from perfbench import dtypes, node, ops
from perfbench.errors import UsageError
from perfbench.ops import _eltwise, _movement, base
from perfbench.ops.base import Case, NodeInfo, NodeUnsupported


def test_heads_above_the_maximum_are_refused_with_the_bound_and_a_fix():
    with pytest.raises(UsageError) as ei:
        ops.get("Softmax").make_case({"heads": 10**12, "queries": 1, "keys": 64}, "suite.toml: ops[0].axes")
    msg = str(ei.value)
    assert msg.startswith("suite.toml: ops[0].axes: heads must be <= 1024, got 1000000000000"), msg
    assert "smaller heads" in msg
    assert ei.value.exit_code == 2


def test_a_case_above_the_bytes_cap_is_refused():
    # 4096 x 4096 x 262144 floats in: 2**43 bytes at 2 bytes a float, nothing allocated
    with pytest.raises(UsageError) as ei:
        ops.get("Softmax").make_case({"batch": 4096, "heads": 1, "queries": 4096, "keys": 262144})
    msg = str(ei.value)
    assert "Softmax.batch=4096.heads=1.queries=4096.keys=262144" in msg
    assert f"{2**43:,} bytes" in msg and "4 GiB" in msg and "smaller shape" in msg, msg
    assert ei.value.exit_code == 2


def test_the_bytes_cap_counts_every_input_and_output_exactly():
    sm = ops.get("Softmax")
    keys = base.MAX_CASE_BYTES // 2  # x at 2 bytes a float: exactly the cap (y is not counted)
    case = sm.make_case({"heads": 1, "queries": 1, "keys": keys})
    assert sm.case_bytes(case, outputs=False) == base.MAX_CASE_BYTES
    assert sm.case_bytes(case) == 2 * base.MAX_CASE_BYTES
    with pytest.raises(UsageError, match="4 GiB"):
        sm.make_case({"heads": 1, "queries": 1, "keys": keys + 1})
    # GroupQueryAttention's shared KV buffer: a symbolic dimension, and present IS past (once)
    gqa = ops.get("GroupQueryAttention")
    c = gqa.make_case({"heads": 4, "kv_heads": 2, "head_size": 32, "past": 100, "kv": "shared"})
    q, kv, cache = 4 * 32, 2 * 32, 2 * 101 * 32
    assert gqa.case_bytes(c) == 2 * (q + 2 * kv + 2 * cache + q) + 4 * 2  # seqlens_k, total_sequence_length int32


def test_bytes_written_are_the_outputs_in_the_cells_dtype_aliased_ones_not_counted():
    from perfbench import dtypes

    sm = ops.get("Softmax")
    case = sm.make_case({"heads": 2, "queries": 3, "keys": 64})
    assert sm.bytes_written(case, dtypes.F32) == 2 * 3 * 64 * 4
    assert sm.bytes_written(case, dtypes.BF16) == 2 * 3 * 64 * 2
    gqa = ops.get("GroupQueryAttention")
    shared = gqa.make_case({"heads": 4, "kv_heads": 2, "head_size": 32, "past": 100, "kv": "shared"})
    copied = gqa.make_case({"heads": 4, "kv_heads": 2, "head_size": 32, "past": 100, "kv": "copy"})
    assert gqa.bytes_written(shared, dtypes.F32) == 4 * 32 * 4  # the output; present IS past
    assert gqa.bytes_written(copied, dtypes.F32) == 4 * (4 * 32 + 2 * 2 * 101 * 32)  # and a new present K/V


def test_the_shared_node_cap_is_the_case_cap():
    assert node.MAX_GENERATED_BYTES == base.MAX_CASE_BYTES == 4 * 2**30


def test_products_are_exact_not_wrapped_int64():
    assert _movement.prod((2**32, 2**32)) == 2**64
    assert _movement.prod(()) == 1
    assert _eltwise.size((2**32, 2**32)) == 2**64


def test_gather_table_of_2_64_elements_meets_the_table_cap():
    op = ops.get("Gather")
    params = {"vocab": 2**32, "hidden": 2**32, "batch": 1, "seq": 1, "index": "int64", "outer": 1}
    with pytest.raises(UsageError, match="4 GiB"):
        op.make_case(params)
    # the table cap itself (a case made without make_case): 2**64 elements, not 0
    case = Case("Gather", tuple(params.items()))
    with pytest.raises(UsageError, match=r"over the 1 GiB cap"):
        op.make_inputs(case, dtypes.F32, np.random.default_rng(0))
    # a model's Gather node on such a table: refused by the same cap
    info = NodeInfo("Gather", "", 13, {}, [(np.dtype(np.float32), (2**32, 2**32)), (np.dtype(np.int64), (1, 4))],
                    ["y"], "f32", [None, None])
    with pytest.raises(NodeUnsupported, match="1 GiB"):
        op.from_node(info)


def test_integers_past_int64_are_refused():
    with pytest.raises(UsageError, match="64-bit"):
        ops.get("Trilu").make_case({"rows": 4, "cols": 4, "k": 2**63})


def _int_params():
    return [pytest.param(op.name, p.name, id=f"{op.name}.{p.name}")
            for op in ops.REGISTRY.values() if type(op).__module__.startswith("perfbench.ops.")
            for p in op.params if p.kind is int and not p.choices]


@pytest.mark.parametrize("op_name, param", _int_params())
def test_a_huge_parameter_is_a_usage_error_not_an_allocation(op_name, param):
    """Every integer parameter at 2**62 is refused (or, like Trilu's k, accepted) while the case is
    made, before anything the size of the case is allocated."""
    op = ops.get(op_name)
    values = {**op.test_cases[0], param: 2**62}
    try:
        case = op.make_case(values)
    except UsageError:
        return
    assert op.case_bytes(case) <= base.MAX_CASE_BYTES


def test_an_f16_node_that_node_ran_before_the_cap_still_maps():
    """Softmax 32768 x 40000 in f16 (2.4 GiB in, as much out): `perfbench node` ran it before the
    case cap (its cap: 4 GiB of generated inputs); counting outputs or floats at f32 refused it."""
    case = ops.get("Softmax").make_case({"heads": 1, "queries": 32768, "keys": 40000})
    assert ops.get("Softmax").case_bytes(case, outputs=False) == 32768 * 40000 * 2


def test_transpose_perm_of_non_ascii_digits_is_a_usage_error():
    """'²' is a digit to str.isdigit but not to int(): a ValueError traceback before."""
    with pytest.raises(UsageError, match="perm"):
        ops.get("Transpose").make_case({"shape": "2x3", "perm": "²"})


@pytest.mark.parametrize("suite", ["norms", "elementwise", "data_movement", "onnx_attention", "attention"])
def test_every_suite_case_writes_no_more_than_it_moves(suite):
    """The write share that places a side's ceiling between the read and copy probes
    (runner.write_share) lies in [0, 1] for every cell of every suite, in every dtype."""
    from perfbench import dtypes, runner, suites

    cells, _ = suites.load(suite).expand()
    assert cells
    for c in cells:
        op, dt = ops.get(c.case.op), dtypes.get(c.dtype)
        written, moved = op.bytes_written(c.case, dt), op.bytes_moved(c.case, dt)
        assert 0 <= written <= moved, (c.case.case_id, c.dtype, written, moved)
        assert 0 <= runner.write_share(op, c.case, dt) <= 1
