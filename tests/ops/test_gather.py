"""Gather beyond the op contract (tests/ops/test_contract.py): the memory-mapped embedding table is
generated once and shared (never copied by the harness nor by ORT's binding), capped, never left
half written; from_node maps any axis."""

from __future__ import annotations

import os

import numpy as np
import pytest

from perfbench import dtypes
from perfbench import ops as ops_pkg
from perfbench.errors import UsageError
from perfbench.ops import _movement as mv
from perfbench.ops import ort as ortlib
from perfbench.ops.base import NodeInfo, NodeUnsupported
from perfbench.timing import protocol
from tests.helpers import array_node_info as _node
from tests.helpers import library, same_bits
from tests.helpers import run_binding as _run_binding

pytestmark = pytest.mark.usefixtures("auto_isa")

SEED = 20261129
DTYPES = ("f32", "f16", "bf16")


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
    assert same_bits(a["data"], b["data"]) and same_bits(a["indices"], b["indices"])
    # the same bytes as the in-memory generator (small tables), and another seed differs
    mem = mv.table((300, 20), dt, int(np.random.default_rng(SEED).integers(0, 2**63)))
    assert not isinstance(mem, np.memmap) or mem.filename == a["data"].filename
    other = op.make_inputs(case, dt, np.random.default_rng(SEED + 1))
    assert not same_bits(other["data"], a["data"])
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
    op.prepare_ours(library(), case, mine, out, 2).run()
    oracle = op.oracle(case, op.oracle_inputs(case, a))
    assert same_bits(out["output"], oracle["output"].astype(dt.numpy))
    assert same_bits(ran[2]["output"], out["output"])


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
        assert same_bits(_run_binding(op, b, [data, idx]), want)
    with pytest.raises(UsageError, match="axis=4"):
        op.from_node(_node("Gather", [(np.float32, data.shape), (np.int64, (2,))], {"axis": 4}))
    with pytest.raises(NodeUnsupported, match="empty"):
        op.from_node(_node("Gather", [(np.float32, data.shape), (np.int64, (0,))]))
    with pytest.raises(NodeUnsupported, match="float32"):
        op.from_node(_node("Gather", [(np.int64, (5, 2)), (np.int64, (3,))]))
