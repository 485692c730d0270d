"""Bad arguments to the data-movement kernels never crash the process: the Python wrappers raise
UsageError before C is called, and the C layer itself (hand-built args structs, validation
bypassed) returns a status with a message naming the problem, and writes nothing -- in
particular an out-of-range Gather or ScatterND index is refused, never read or written."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from perfbench.errors import NativeError, UsageError
from perfbench.kernels_ffi import movement as mvk
from tests.helpers import readonly

INVALID = 1  # PB_ERR_INVALID_ARGUMENT
UNSUPPORTED = 2  # PB_ERR_UNSUPPORTED


pytestmark = pytest.mark.usefixtures("auto_isa")


def _f(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)




# ---- Python wrappers ---------------------------------------------------------------------------

WRAPPER_BAD = {
    # name: (wrapper, kwargs factory)
    "transpose-float64": (mvk.transpose, lambda: dict(x=np.ones((2, 3)), y=np.ones((3, 2)), perm=[1, 0])),
    "transpose-y-dtype": (mvk.transpose, lambda: dict(x=_f((2, 3)), y=np.ones((3, 2), np.float16), perm=[1, 0])),
    "transpose-y-shape": (mvk.transpose, lambda: dict(x=_f((2, 3)), y=np.ones((2, 3), np.float32), perm=[1, 0])),
    "transpose-bad-perm": (mvk.transpose, lambda: dict(x=_f((2, 3)), y=np.ones((3, 2), np.float32), perm=[1, 1])),
    "transpose-perm-length": (mvk.transpose, lambda: dict(x=_f((2, 3)), y=np.ones((3, 2), np.float32), perm=[1, 0, 2])),
    "transpose-rank-9": (mvk.transpose, lambda: dict(x=_f((1,) * 9), y=_f((1,) * 9), perm=list(range(9)))),
    "transpose-in-place": (mvk.transpose, lambda: (lambda x: dict(x=x, y=x, perm=[0, 1]))(_f((3, 3)))),
    "transpose-y-read-only": (mvk.transpose, lambda: dict(x=_f((2, 3)), y=readonly(_f((3, 2))), perm=[1, 0])),
    "transpose-x-strided": (mvk.transpose, lambda: dict(x=_f((2, 6))[:, ::2], y=_f((3, 2)), perm=[1, 0])),
    "transpose-threads-0": (mvk.transpose, lambda: dict(x=_f((2, 3)), y=_f((3, 2)), perm=[1, 0], threads=0)),
    "gather-index-too-large": (mvk.gather, lambda: dict(data=_f((10, 4)), indices=np.array([0, 10]), output=_f((2, 4)))),
    "gather-index-too-negative": (mvk.gather, lambda: dict(data=_f((10, 4)), indices=np.array([-11]), output=_f((1, 4)))),
    "gather-index-int16": (mvk.gather, lambda: dict(data=_f((10, 4)), indices=np.array([1], np.int16), output=_f((1, 4)))),
    "gather-index-float": (mvk.gather, lambda: dict(data=_f((10, 4)), indices=np.array([1.0]), output=_f((1, 4)))),
    "gather-axis-2": (mvk.gather, lambda: dict(data=_f((10, 4)), indices=np.array([1]), output=_f((1, 4)), axis=2)),
    "gather-axis-bool": (mvk.gather, lambda: dict(data=_f((10, 4)), indices=np.array([1]), output=_f((1, 4)), axis=True)),
    "gather-output-shape": (mvk.gather, lambda: dict(data=_f((10, 4)), indices=np.array([1, 2]), output=_f((1, 4)))),
    "gather-output-is-data": (mvk.gather, lambda: (lambda d: dict(data=d, indices=np.array([1]), output=d[:1]))(_f((10, 4)))),
    "gather-data-bf16-output-f32": (mvk.gather, lambda: dict(data=_f((10, 4), ml_dtypes.bfloat16), indices=np.array([1]),
                                                             output=_f((1, 4)))),
    "concat-no-inputs": (mvk.concat, lambda: dict(inputs=[], output=_f((2, 3)), axis=0)),
    "concat-shape-off-axis": (mvk.concat, lambda: dict(inputs=[_f((2, 3)), _f((2, 4))], output=_f((4, 3)), axis=0)),
    "concat-rank-differs": (mvk.concat, lambda: dict(inputs=[_f((2, 3)), _f((2, 3, 1))], output=_f((4, 3)), axis=0)),
    "concat-output-shape": (mvk.concat, lambda: dict(inputs=[_f((2, 3)), _f((2, 3))], output=_f((4, 4)), axis=0)),
    "concat-axis-out-of-range": (mvk.concat, lambda: dict(inputs=[_f((2, 3)), _f((2, 3))], output=_f((4, 3)), axis=-3)),
    "concat-dtype-mix": (mvk.concat, lambda: dict(inputs=[_f((2, 3)), _f((2, 3), np.float16)], output=_f((4, 3)), axis=0)),
    "concat-output-is-input": (mvk.concat, lambda: (lambda o: dict(inputs=[o[:2], _f((2, 3))], output=o, axis=0))(_f((4, 3)))),
    "scatter-index-out-of-range": (mvk.scatter_nd, lambda: dict(data=_f((4, 3)), indices=np.array([[4]]), updates=_f((1, 3)),
                                                                output=_f((4, 3)))),
    "scatter-index-int32": (mvk.scatter_nd, lambda: dict(data=_f((4, 3)), indices=np.array([[1]], np.int32),
                                                         updates=_f((1, 3)), output=_f((4, 3)))),
    "scatter-depth-too-deep": (mvk.scatter_nd, lambda: dict(data=_f((4, 3)), indices=np.array([[1, 1, 1]]),
                                                            updates=_f((1,)), output=_f((4, 3)))),
    "scatter-updates-shape": (mvk.scatter_nd, lambda: dict(data=_f((4, 3)), indices=np.array([[1]]), updates=_f((1, 2)),
                                                           output=_f((4, 3)))),
    "scatter-duplicates-without-reduction": (mvk.scatter_nd, lambda: dict(data=_f((4, 3)), indices=np.array([[1], [-3]]),
                                                                          updates=_f((2, 3)), output=_f((4, 3)))),
    "scatter-bad-reduction": (mvk.scatter_nd, lambda: dict(data=_f((4, 3)), indices=np.array([[1]]), updates=_f((1, 3)),
                                                           output=_f((4, 3)), reduction="avg")),
    "scatter-output-overlaps-data": (mvk.scatter_nd, lambda: (lambda d: dict(data=d[:4], indices=np.array([[1]]),
                                                                              updates=_f((1, 3)), output=d[1:]))(_f((5, 3)))),
    "trilu-rank-1": (mvk.trilu, lambda: dict(x=_f((5,)), y=_f((5,)))),
    "trilu-upper-2": (mvk.trilu, lambda: dict(x=_f((3, 3)), y=_f((3, 3)), upper=2)),
    "trilu-k-float": (mvk.trilu, lambda: dict(x=_f((3, 3)), y=_f((3, 3)), k=1.5)),
    "trilu-k-beyond-int64": (mvk.trilu, lambda: dict(x=_f((3, 3)), y=_f((3, 3)), k=2**63)),
    "trilu-partial-overlap": (mvk.trilu, lambda: (lambda a: dict(x=a[:3], y=a[1:]))(_f((4, 3)))),
    "trilu-y-shape": (mvk.trilu, lambda: dict(x=_f((3, 3)), y=_f((3, 4)))),
}


@pytest.mark.parametrize("case", list(WRAPPER_BAD))
def test_wrapper_rejects(lib, case):
    fn, make = WRAPPER_BAD[case]
    kwargs = make()
    outs = [v for k, v in kwargs.items() if k in ("y", "output") and isinstance(v, np.ndarray)]
    before = [o.copy() for o in outs]
    with pytest.raises(UsageError):
        fn(lib, **kwargs)
    for o, b in zip(outs, before):
        assert o.tobytes() == b.tobytes()  # nothing ran


def test_wrappers_accept_in_place_where_allowed(lib):
    x = _f((4, 5))
    want = np.triu(x, 1)
    mvk.trilu(lib, x, x, 1, 1).run()
    assert np.array_equal(x, want)
    d = _f((4, 3))
    u = _f((1, 3))
    want = d.copy()
    want[2] = u[0]
    mvk.scatter_nd(lib, d, np.array([[-2]]), u, d).run()
    assert np.array_equal(d, want)


# ---- the C layer, validation bypassed ------------------------------------------------------------


def _exec(a, threads=1):
    a.exec.device, a.exec.num_threads = 0, threads


class Transpose:
    def __init__(self, lib):
        self.x = _f((3, 4, 5))
        self.y = np.zeros((5, 3, 4), np.float32)
        a = lib.ffi.new("pb_transpose_args*")
        _exec(a)
        a.dtype, a.rank = 1, 3
        for i, (s, p) in enumerate(zip(self.x.shape, (2, 0, 1))):
            a.shape[i], a.perm[i] = s, p
        a.x, a.y = lib.ptr(self.x), lib.ptr(self.y)
        self.args, self.kernel, self.out = a, "transpose", self.y


class Gather:
    def __init__(self, lib):
        self.data = _f((10, 4))
        self.idx = np.array([0, -1, 9], np.int64)
        self.out = np.zeros((3, 4), np.float32)
        a = lib.ffi.new("pb_gather_args*")
        _exec(a)
        a.dtype, a.index_type = 1, 7
        a.outer, a.axis_dim, a.inner, a.n_indices = 1, 10, 4, 3
        a.data, a.indices, a.output = lib.ptr(self.data), lib.ptr(self.idx), lib.ptr(self.out)
        self.args, self.kernel = a, "gather"


class Concat:
    def __init__(self, lib):
        self.a, self.b = _f((2, 3, 4)), _f((2, 1, 4), seed=1)
        self.out = np.zeros((2, 4, 4), np.float32)
        a = lib.ffi.new("pb_concat_args*")
        _exec(a)
        self.extents = lib.ffi.new("int64_t[]", [3, 1])
        self.ptrs = lib.ffi.new("const void *[]", [lib.ptr(self.a), lib.ptr(self.b)])
        a.dtype, a.n_inputs, a.outer, a.inner = 1, 2, 2, 4
        a.extents, a.inputs, a.output = self.extents, self.ptrs, lib.ptr(self.out)
        self.args, self.kernel = a, "concat"


class Scatter:
    def __init__(self, lib):
        self.data = _f((4, 5, 3))
        self.idx = np.array([[0, 1], [-1, -5]], np.int64)
        self.upd = _f((2, 3), seed=2)
        self.out = np.zeros_like(self.data)
        a = lib.ffi.new("pb_scatter_nd_args*")
        _exec(a)
        a.dtype, a.reduction, a.rank, a.k = 1, 0, 3, 2
        for i, s in enumerate(self.data.shape):
            a.shape[i] = s
        a.n_updates = 2
        a.indices = lib.ffi.cast("const int64_t *", self.idx.ctypes.data)
        a.data, a.updates, a.output = lib.ptr(self.data), lib.ptr(self.upd), lib.ptr(self.out)
        self.args, self.kernel = a, "scatter_nd"


class Trilu:
    def __init__(self, lib):
        self.x = _f((2, 5, 6))
        self.out = np.zeros_like(self.x)
        a = lib.ffi.new("pb_trilu_args*")
        _exec(a)
        a.dtype, a.upper, a.k, a.batch, a.rows, a.cols = 1, 1, 0, 2, 5, 6
        a.x, a.y = lib.ptr(self.x), lib.ptr(self.out)
        self.args, self.kernel = a, "trilu"


STRUCTS = {"transpose": Transpose, "gather": Gather, "concat": Concat, "scatter_nd": Scatter, "trilu": Trilu}


def test_c_baseline_structs_are_valid(lib):
    t = Transpose(lib)
    lib.call("transpose", t.args)
    assert np.array_equal(t.y, t.x.transpose(2, 0, 1))
    g = Gather(lib)
    lib.call("gather", g.args)
    assert np.array_equal(g.out, g.data[[0, -1, 9]])
    c = Concat(lib)
    lib.call("concat", c.args)
    assert np.array_equal(c.out, np.concatenate([c.a, c.b], 1))
    s = Scatter(lib)
    lib.call("scatter_nd", s.args)
    want = s.data.copy()
    want[0, 1], want[-1, -5] = s.upd[0], s.upd[1]
    assert np.array_equal(s.out, want)
    tr = Trilu(lib)
    lib.call("trilu", tr.args)
    assert np.array_equal(tr.out, np.triu(tr.x))


def _set(lib, h, field, value):
    target = h.args.exec if field in ("device", "num_threads") else h.args
    if isinstance(field, tuple):  # an array element
        getattr(h.args, field[0])[field[1]] = value
    elif value == "NULL":
        setattr(target, field, lib.ffi.NULL)
    else:
        setattr(target, field, value)


C_BAD = [
    # kernel, field, value, status, words
    ("transpose", "x", "NULL", INVALID, ["NULL"]),
    ("transpose", "y", "NULL", INVALID, ["NULL"]),
    ("transpose", "rank", 0, INVALID, ["rank=0"]),
    ("transpose", "rank", 9, INVALID, ["rank=9"]),
    ("transpose", ("perm", 1), 2, INVALID, ["permutation"]),
    ("transpose", ("perm", 0), -1, INVALID, ["permutation"]),
    ("transpose", ("shape", 1), -4, INVALID, ["shape[1]=-4"]),
    ("transpose", ("shape", 0), 2**62, INVALID, ["overflows"]),
    ("transpose", "dtype", 7, UNSUPPORTED, ["dtype 7"]),
    ("transpose", "num_threads", 0, INVALID, ["num_threads=0"]),
    ("transpose", "device", 1, UNSUPPORTED, ["device 1"]),
    ("gather", "data", "NULL", INVALID, ["NULL"]),
    ("gather", "indices", "NULL", INVALID, ["indices is NULL"]),
    ("gather", "output", "NULL", INVALID, ["NULL"]),
    ("gather", "index_type", 5, INVALID, ["index_type=5"]),
    ("gather", "axis_dim", 9, INVALID, ["indices[2] = 9", "[-9, 9)"]),
    ("gather", "axis_dim", -1, INVALID, ["axis_dim=-1"]),
    ("gather", "n_indices", -2, INVALID, ["n_indices=-2"]),
    ("gather", "inner", 2**62, INVALID, ["overflow"]),
    ("gather", "dtype", 2, UNSUPPORTED, ["dtype 2"]),
    ("concat", "n_inputs", 0, INVALID, ["n_inputs=0"]),
    ("concat", "n_inputs", 5000, INVALID, ["n_inputs=5000"]),
    ("concat", "extents", "NULL", INVALID, ["NULL"]),
    ("concat", "inputs", "NULL", INVALID, ["NULL"]),
    ("concat", "output", "NULL", INVALID, ["output is NULL"]),
    ("concat", ("extents", 1), -1, INVALID, ["extents[1]=-1"]),
    ("concat", ("extents", 0), 2**61, INVALID, ["overflow"]),
    ("concat", "outer", -1, INVALID, ["outer=-1"]),
    ("scatter_nd", "reduction", 7, INVALID, ["reduction=7"]),
    ("scatter_nd", "k", 4, INVALID, ["k=4"]),
    ("scatter_nd", "k", 0, INVALID, ["k=0"]),
    ("scatter_nd", "rank", 9, INVALID, ["rank=9"]),
    ("scatter_nd", "indices", "NULL", INVALID, ["indices is NULL"]),
    ("scatter_nd", "updates", "NULL", INVALID, ["updates is NULL"]),
    ("scatter_nd", "data", "NULL", INVALID, ["NULL"]),
    ("scatter_nd", ("shape", 1), 4, INVALID, ["indices[1, 1] = -5", "[-4, 4)"]),
    ("scatter_nd", "n_updates", -1, INVALID, ["n_updates=-1"]),
    ("trilu", "upper", 3, INVALID, ["upper=3"]),
    ("trilu", "rows", -1, INVALID, ["rows=-1"]),
    ("trilu", "x", "NULL", INVALID, ["NULL"]),
    ("trilu", "cols", 2**62, INVALID, ["overflow"]),
]


@pytest.mark.parametrize("kernel, field, value, status, words", C_BAD,
                         ids=[f"{c[0]}-{c[1] if isinstance(c[1], str) else '%s[%d]' % c[1]}={c[2]}" for c in C_BAD])
def test_c_returns_a_status(lib, kernel, field, value, status, words):
    h = STRUCTS[kernel](lib)
    _set(lib, h, field, value)
    with pytest.raises(NativeError) as ei:
        lib.call(kernel, h.args)
    e = ei.value
    assert e.status == status, e
    assert e.kernel == kernel
    for w in words:
        assert w in e.message, e.message
    assert not h.out.any()  # validated before anything was written


def test_c_gather_out_of_range_index_is_refused(lib):
    for bad in (10, -11, 2**40, -(2**62)):
        g = Gather(lib)
        g.idx[1] = bad
        with pytest.raises(NativeError) as ei:
            lib.call("gather", g.args)
        assert ei.value.status == INVALID and f"indices[1] = {bad}" in ei.value.message
        assert not g.out.any()
    g = Gather(lib)
    i32 = np.array([3, 10], np.int32)
    g.args.index_type, g.args.n_indices, g.args.indices = 6, 2, lib.ptr(i32)
    with pytest.raises(NativeError, match="indices\\[1\\] = 10"):
        lib.call("gather", g.args)


def test_c_scatter_out_of_range_index_is_refused(lib):
    for pos, bad in (((0, 0), 4), ((1, 1), 5), ((1, 0), -5)):
        s = Scatter(lib)
        s.idx[pos] = bad
        with pytest.raises(NativeError) as ei:
            lib.call("scatter_nd", s.args)
        assert ei.value.status == INVALID and f"indices[{pos[0]}, {pos[1]}] = {bad}" in ei.value.message
        assert not s.out.any()


def test_c_scatter_size_products_overflow(lib):
    """Every size product ScatterND forms is checked, not only the whole tensor's: behind a
    zero-size axis the tensor's product stays 0 while the update slice's (axes k..) or an index
    stride's (axes d+1..k-1) would overflow int64 unchecked (undefined behaviour; it wrapped and
    the call returned ok)."""
    for shape, k in (((0, 2**62, 8), 1),  # the slice: 2^65
                     ((0, 4, 2**61), 2),  # the slice: 2^61, beyond the size limit
                     ((0, 2**40, 2**40), 3)):  # the stride of index axis 0: 2^80
        s = Scatter(lib)
        s.args.k, s.args.n_updates = k, 0
        for i, n in enumerate(shape):
            s.args.shape[i] = n
        with pytest.raises(NativeError) as ei:
            lib.call("scatter_nd", s.args)
        assert ei.value.status == INVALID and "overflow" in ei.value.message, (shape, k, ei.value)
        assert not s.out.any()
    s = Scatter(lib)  # a zero-size tensor of ordinary sizes stays a no-op
    s.args.k, s.args.n_updates, s.args.shape[0] = 1, 0, 0
    lib.call("scatter_nd", s.args)
    assert not s.out.any()


def test_c_overlapping_buffers(lib):
    t = Transpose(lib)
    t.args.y = lib.ffi.cast("void *", t.x.ctypes.data + 8)
    with pytest.raises(NativeError, match="overlap"):
        lib.call("transpose", t.args)
    t.args.y = lib.ptr(t.x)  # a transpose in place is refused too
    with pytest.raises(NativeError, match="overlap"):
        lib.call("transpose", t.args)
    g = Gather(lib)
    g.args.output = lib.ffi.cast("void *", g.data.ctypes.data + 4)
    with pytest.raises(NativeError, match="overlaps"):
        lib.call("gather", g.args)
    c = Concat(lib)
    c.args.output = lib.ffi.cast("void *", c.b.ctypes.data)
    with pytest.raises(NativeError, match="inputs\\[1\\] overlaps"):
        lib.call("concat", c.args)
    s = Scatter(lib)
    s.args.output = lib.ffi.cast("void *", s.data.ctypes.data + 4)
    with pytest.raises(NativeError, match="partially"):
        lib.call("scatter_nd", s.args)
    s = Scatter(lib)
    s.args.output = lib.ffi.cast("void *", s.upd.ctypes.data)
    with pytest.raises(NativeError, match="updates or indices overlap"):
        lib.call("scatter_nd", s.args)
    tr = Trilu(lib)
    tr.args.y = lib.ffi.cast("void *", tr.x.ctypes.data + 4)
    with pytest.raises(NativeError, match="partially"):
        lib.call("trilu", tr.args)
    # exactly in place is allowed for ScatterND and Trilu
    s = Scatter(lib)
    s.args.output = lib.ptr(s.data)
    lib.call("scatter_nd", s.args)
    tr = Trilu(lib)
    want = np.triu(tr.x)
    tr.args.y = lib.ptr(tr.x)
    lib.call("trilu", tr.args)
    assert np.array_equal(tr.x, want)


def test_c_null_args_struct(lib):
    for kernel in STRUCTS:
        with pytest.raises(NativeError) as ei:
            lib.call(kernel, lib.ffi.NULL)
        assert ei.value.status == INVALID and "NULL" in ei.value.message


def test_c_empty_tensors_are_a_no_op(lib):
    t = Transpose(lib)
    t.args.shape[1] = 0
    t.args.x = t.args.y = lib.ffi.NULL
    lib.call("transpose", t.args)
    g = Gather(lib)
    g.args.n_indices = 0
    g.args.indices = lib.ffi.NULL
    lib.call("gather", g.args)
    assert not g.out.any()


def test_library_still_works_after_errors(lib):
    g = Gather(lib)
    g.idx[0] = 99
    with pytest.raises(NativeError):
        lib.call("gather", g.args)
    g.idx[0] = 2
    lib.call("gather", g.args)
    assert np.array_equal(g.out, g.data[[2, -1, 9]])
