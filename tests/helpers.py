"""Shared test helpers (one definition each): the native library, one (op, case, dtype) Cell with
its inputs, float64 oracle and ORT's real outputs (the yardstick), bit comparison, and which
mutants apply in which dtype. The ISA-path fixture is `auto_isa` in tests/conftest.py."""

from __future__ import annotations

import contextlib
import functools

import numpy as np

from perfbench import dtypes, numerics
from perfbench import ops as ops_pkg
from perfbench.ops import ort as ortlib

SEED = 20261129
DTYPES = ("f32", "f16", "bf16")


@functools.cache
def library():
    """The built native library, for module-level use (collection time); tests take the `lib`
    fixture of tests/conftest.py, which is this same object."""
    from perfbench.kernels_ffi import load

    return load()


def same_bits(a, b) -> bool:
    """Bit-identical arrays (a plain bool: pytest never diffs the megabytes behind it)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def slug(text: str) -> str:
    return text.replace(" ", "_")


def mutant_applies_in(op, mutant, dtype: str) -> bool:
    """Some mutants are wrong only below a dtype's rounding: the op lists where they are visible
    (Op.mutant_dtypes)."""
    return dtype in op.mutant_dtypes.get(mutant.name, DTYPES)


class Cell:
    """One (op, case, dtype): seeded inputs, the float64 oracle, ORT's real output (the
    yardstick), run as the Harness runs them: each side on its own copy of aliased inputs (a
    shared KV cache's present IS that side's copy of past), outputs pre-filled with `fill` so that
    an element a kernel leaves unwritten is visible."""

    def __init__(self, op_name: str, params: dict, dtype: str, seed: int = SEED, fill: float = np.nan,
                 ort_threads: int = 1):
        self.op = ops_pkg.get(op_name)
        self.case = self.op.make_case(dict(params))
        self.dt = dtypes.get(dtype)
        self.fill = fill
        self.inputs = self.op.make_inputs(self.case, self.dt, np.random.default_rng(seed))
        self.inputs64 = self.op.oracle_inputs(self.case, self.inputs)
        self.oracle = self.op.oracle(self.case, self.inputs64)
        self.rows = self.row_sizes = self.op.row_sizes(self.case)
        self.floor = self.op.floor(self.dt.name)
        self.shapes = self.op.output_shapes(self.case)
        self.ort_error = ""  # ORT failed at run time (where the op declares it cannot run the case)
        try:
            ran = ortlib.run_case(self.op, self.case, self.inputs, self.dt, ort_threads, fill=fill)
        except Exception as e:  # noqa: BLE001
            if not self.op.ort_cannot_run(self.case, self.dt.name):
                raise
            ran, self.ort_error = None, str(e)
        self.ort_dt, self.ort_in, self.ort_out = ran if ran is not None else (None, None, None)

    def ours_with_inputs(self, lib, threads: int = 1, **overrides) -> tuple[dict, dict]:
        """Our kernel on its own copy of aliased inputs (the cell's inputs stay untouched);
        `overrides` set fields of the args struct before the call (a bug-inducing argument)."""
        mine = self.op.private_inputs(self.case, self.inputs)
        out = self.op.new_outputs(self.case, self.dt.numpy, mine)
        for a in out.values():
            if not any(a is v for v in mine.values()):
                a[...] = self.fill
        call = self.op.prepare_ours(lib, self.case, mine, out, threads)
        for k, v in overrides.items():
            setattr(call.args, k, v)
        call.run()
        return mine, out

    def ours(self, lib, threads: int = 1, **overrides) -> dict:
        return self.ours_with_inputs(lib, threads, **overrides)[1]

    def as_kernel_output(self, outputs: dict) -> dict:
        """float64 results stored the way a kernel of the cell's dtype would store them."""
        types = self.op.output_dtypes(self.case, self.dt.numpy)
        with np.errstate(over="ignore", invalid="ignore"):
            return {k: np.asarray(v).astype(types[k]).astype(np.float64) for k, v in outputs.items()}

    def mutant_output(self, mutant) -> dict:
        return self.as_kernel_output(mutant.outputs(self.op, self.case, self.inputs64))

    def gate(self, outputs: dict) -> numerics.GateResult:
        return numerics.gate(outputs, self.ort_out, self.oracle, self.rows, self.floor)


@functools.lru_cache(maxsize=64)
def _cached(op_name: str, params: tuple, dtype: str, seed: int, fill: float) -> Cell:
    return Cell(op_name, dict(params), dtype, seed, fill)


def cell(op_name: str, params: dict, dtype: str, seed: int = SEED, fill: float = np.nan) -> Cell:
    """A cached Cell (tests must not write into its inputs or ORT outputs)."""
    return _cached(op_name, tuple(params.items()), dtype, seed, fill)


def readonly(a: np.ndarray) -> np.ndarray:
    """A read-only copy (what a wrapper must refuse as an output)."""
    a = a.copy()
    a.flags.writeable = False
    return a


def node_info(op_type, inputs, *, domain="", opset=18, attrs=None, outputs=("y",), dtype="f32", values=None):
    """A hand-built NodeInfo (what `perfbench node` hands from_node): inputs as (dtype name, shape)
    with dtype names f32/f16/bf16/i64, None for an absent optional input."""
    import ml_dtypes

    from perfbench.ops.base import NodeInfo

    np_dt = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "i64": np.int64}
    ins = [None if i is None else (np.dtype(np_dt[i[0]]), tuple(i[1])) for i in inputs]
    return NodeInfo(op_type, domain, opset, dict(attrs or {}), ins, list(outputs), dtype, list(values or []))


def array_node_info(op_type, inputs, attrs=None, outputs=("y",), values=None, opset=18, domain=""):
    """A hand-built NodeInfo from (numpy dtype, shape) inputs (None: absent); the node's dtype is
    its first float input's."""
    from perfbench.ops.base import NodeInfo

    ins = [None if i is None else (np.dtype(i[0]), tuple(i[1])) for i in inputs]
    floats = [d for d, _ in (i for i in ins if i) if d in (np.float32, np.float16) or d == dtypes.BF16.numpy]
    name = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", dtypes.BF16.numpy: "bf16"}
    return NodeInfo(op_type, domain, opset, attrs or {}, ins, list(outputs), name[floats[0]] if floats else None,
                    values or [])


def run_binding(op, binding, arrays: list, dt=dtypes.F32) -> np.ndarray:
    """Our kernel on a node's own arrays, reshaped to what the bound case's graph declares (what
    `perfbench node` runs); the one output the binding names, in the node's shape."""
    spec = op.graph(binding.case)
    declared = {n: shape for n, _, shape in spec.inputs if n}
    inputs = op.make_inputs(binding.case, dt, np.random.default_rng(0))
    for name, idx in binding.inputs.items():
        inputs[name] = np.ascontiguousarray(arrays[idx]).reshape(declared[name])
    out = op.new_outputs(binding.case, dt.numpy, inputs)
    op.prepare_ours(library(), binding.case, inputs, out, 1).run()
    (name, (index, shape)), = binding.outputs.items()
    assert index == 0
    return out[name].reshape(shape)


def misaligned(shape, dt):
    """A C-contiguous array one element past a 64-byte boundary (streaming stores peel first)."""
    n = int(np.prod(shape))
    buf = np.empty(n + 64, dt)
    off = (-buf.ctypes.data % 64) // buf.itemsize + 1
    return buf[off:off + n].reshape(shape)


@contextlib.contextmanager
def llc_bytes(lib, nbytes: int):
    """The library's last-level cache size set to `nbytes` for the block (3: every output of more
    than a byte streams; 2**40: none does), then restored: both store paths on any host."""
    before = lib.lib.pb_llc_bytes()
    lib.check(lib.lib.pb_set_llc_bytes(nbytes), "set the last-level cache size")
    try:
        yield
    finally:
        lib.check(lib.lib.pb_set_llc_bytes(before), "restore the last-level cache size")


STREAM, CACHED = 3, 1 << 40
