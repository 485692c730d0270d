"""MatMulNBits' weight layout and its two float64 references (perfbench/ops/_nbits.py) against real
ORT sessions (issue 19): accuracy_level 0 agrees with the dequantized-weight reference; accuracy 4
with B, scales and zero points as initializers agrees with the reference over A quantized per
block to int8, and is far from the plain one; as graph inputs, or with float zero points, ORT
falls back to f32 and agrees with the plain one."""

from __future__ import annotations

import numpy as np
import pytest

from perfbench import dtypes
from perfbench.ops import _nbits as nb
from perfbench.ops import ort as ortlib
from perfbench.ops.base import GraphSpec


def _err(y, ref) -> float:
    return float(np.max(np.abs(np.asarray(y, np.float64) - ref) / (1 + np.abs(ref))))


def _ort(a, b, scales, zp, bias, *, k, n, bits, block_size, accuracy, initializers=True):
    """Y of one MatMulNBits node in a real session (1 thread), built as the harness builds its
    graphs (ortlib.build_model): A a graph input; B, scales, zero points and bias initializers, or
    graph inputs with initializers=False."""
    consts = {"B": b, "scales": scales, "zero_points": zp, "bias": bias}
    zp_spec = ("", "float", ()) if zp is None else ("zero_points", "uint8" if zp.dtype == np.uint8 else "float", zp.shape)
    bias_spec = ("", "float", ()) if bias is None else ("bias", "float", bias.shape)
    inputs = [("A", "float", a.shape), ("B", "uint8", b.shape), ("scales", "float", scales.shape), zp_spec,
              ("", "int32", ()), bias_spec]
    present = {name: v for name, v in consts.items() if v is not None}
    spec = GraphSpec("MatMulNBits", "com.microsoft", 1, inputs, [("Y", (a.shape[0], n))],
                     attrs={"K": k, "N": n, "bits": bits, "block_size": block_size, "accuracy_level": accuracy},
                     initializers=tuple(present) if initializers else ())
    model = ortlib.build_model(spec, dtypes.get("f16" if a.dtype == np.float16 else "f32"), plain_names=True,
                               values=ortlib.initializer_values(spec, present))
    feeds = {"A": a} if initializers else {"A": a, **present}
    return ortlib.make_session(model, 1, "off").run(None, feeds)[0]


def test_bits_pack_lowest_first_and_round_trip():
    # 4 bits: even k in the low nibble; 2 bits: k % 4 == 0 in bits 0-1
    assert nb.pack_bits(np.array([[1, 2, 3, 4]]), 4).tolist() == [[0x21, 0x43]]
    assert nb.pack_bits(np.array([[1, 2, 3, 0]]), 2).tolist() == [[0b00111001]]
    rng = np.random.default_rng(0)
    for bits in (2, 4, 8):
        q = rng.integers(0, 1 << bits, size=(3, 64))
        assert (nb.unpack_bits(nb.pack_bits(q, bits), bits, 64) == q).all()


def test_int8_quantization_rounds_half_to_even_and_zero_blocks_stay_zero():
    # max |a| = 127: scale 1, inverse 1, so q = a rounded half to even
    a = np.array([[127.0, 2.5, 3.5, -2.5, -0.5, 1.5, 0.0, 0.0]], np.float32)
    got = nb.quantize_a_int8(a, 16)
    assert got.tolist() == [[127.0, 2.0, 4.0, -2.0, -0.0, 2.0, 0.0, 0.0]]
    z = nb.quantize_a_int8(np.zeros((2, 40), np.float32), 16)
    assert (z == 0).all() and np.isfinite(z).all()


# (m, k, n, bits, block_size, bias, dtype); K = 1000 leaves the last block of 32 with 8 values
CASES = [(1, 512, 48, 4, 32, False, np.float32), (3, 1000, 40, 4, 32, True, np.float32),
         (2, 512, 33, 4, 128, False, np.float32), (3, 256, 20, 8, 32, False, np.float32),
         (3, 256, 20, 4, 16, False, np.float32), (3, 256, 20, 2, 32, False, np.float32),
         (3, 1024, 24, 4, 32, True, np.float16)]


@pytest.mark.parametrize("m,k,n,bits,bs,bias,dt", CASES)
def test_ort_accuracy_0_and_4_against_the_two_references(m, k, n, bits, bs, bias, dt):
    rng = np.random.default_rng(k + n + bits)
    b, s, zp = nb.random_weights(rng, n, k, bits=bits, block_size=bs, scale_dtype=dt)
    a = rng.standard_normal((m, k)).astype(dt)
    bi = rng.standard_normal((n,)).astype(dt) if bias else None
    floor = 2e-5 if dt == np.float32 else 2e-3  # the activation type's rounding of Y
    plain = nb.reference(a, b, s, zp, bi, k=k, bits=bits, block_size=bs)
    int8a = nb.reference_int8_a(a, b, s, zp, bi, k=k, bits=bits, block_size=bs)
    assert _err(int8a, plain) > 10 * floor  # the two references are far apart on this data
    y0 = _ort(a, b, s, zp, bi, k=k, n=n, bits=bits, block_size=bs, accuracy=0)
    assert _err(y0, plain) <= floor
    y4 = _ort(a, b, s, zp, bi, k=k, n=n, bits=bits, block_size=bs, accuracy=4)
    assert _err(y4, int8a) <= floor, _err(y4, plain)
    # the same weights as graph inputs: ORT cannot prepack them and runs f32
    y4i = _ort(a, b, s, zp, bi, k=k, n=n, bits=bits, block_size=bs, accuracy=4, initializers=False)
    assert _err(y4i, plain) <= floor


def test_ort_accuracy_4_with_float_zero_points_or_none_runs_f32_or_the_default_zero_point():
    rng = np.random.default_rng(3)
    k, n, bs = 256, 16, 32
    b, s, zf = nb.random_weights(rng, n, k, bits=4, block_size=bs, packed_zp=False)
    a = rng.standard_normal((2, k)).astype(np.float32)
    y = _ort(a, b, s, zf, None, k=k, n=n, bits=4, block_size=bs, accuracy=4)
    assert _err(y, nb.reference(a, b, s, zf, k=k, bits=4, block_size=bs)) <= 2e-5
    # no zero points: 8 for every block (int8 path: the int8-A reference with zp None)
    y = _ort(a, b, s, None, None, k=k, n=n, bits=4, block_size=bs, accuracy=4)
    assert _err(y, nb.reference_int8_a(a, b, s, None, k=k, bits=4, block_size=bs)) <= 2e-5
    y = _ort(a, b, s, None, None, k=k, n=n, bits=4, block_size=bs, accuracy=0)
    assert _err(y, nb.reference(a, b, s, None, k=k, bits=4, block_size=bs)) <= 2e-5


# ORT 1.31.1 (pinned), accuracy 4, weights as initializers: which (bits, block_size) take the
# int8 path; the rest run f32 (probed on a Zen 4 over bits 2/4/8 x blocks 16..256, M = 1 and 3)
INT8_PATH = {(2, 16): False, (2, 32): True, (2, 128): True, (2, 256): False, (4, 16): True, (4, 256): True,
             (8, 16): True, (8, 256): True}


@pytest.mark.parametrize("bits,bs", sorted(INT8_PATH))
def test_which_bits_and_blocks_ort_runs_as_int8_at_accuracy_4(bits, bs):
    rng = np.random.default_rng(bits * 1000 + bs)
    k, n = 512, 16
    b, s, zp = nb.random_weights(rng, n, k, bits=bits, block_size=bs)
    a = rng.standard_normal((1, k)).astype(np.float32)
    y = _ort(a, b, s, zp, None, k=k, n=n, bits=bits, block_size=bs, accuracy=4)
    want = (nb.reference_int8_a if INT8_PATH[(bits, bs)] else nb.reference)(a, b, s, zp, k=k, bits=bits, block_size=bs)
    assert _err(y, want) <= 2e-5
    assert nb.ort_runs_int8(bits, bs, "packed", True) == INT8_PATH[(bits, bs)]  # the op's statement of it


def test_padding_bits_are_ignored():
    """B's bits past K in the last block and the unused fields of packed zero points (13 blocks of
    4 bits: the last byte's high nibble) set at random: ORT ignores them at accuracy 0 and 4, as
    the references do."""
    from tests.kernels_ffi.test_matmul_nbits import _garbage_padding

    rng = np.random.default_rng(7)
    k, n, bs = 200, 8, 16
    b, s, zp = nb.random_weights(rng, n, k, bits=4, block_size=bs)
    b, zp = _garbage_padding(rng, b, zp, k, 4, bs)
    a = rng.standard_normal((2, k)).astype(np.float32)
    y0 = _ort(a, b, s, zp, None, k=k, n=n, bits=4, block_size=bs, accuracy=0)
    assert _err(y0, nb.reference(a, b, s, zp, k=k, bits=4, block_size=bs)) <= 2e-5
    y4 = _ort(a, b, s, zp, None, k=k, n=n, bits=4, block_size=bs, accuracy=4)
    assert _err(y4, nb.reference_int8_a(a, b, s, zp, k=k, bits=4, block_size=bs)) <= 2e-5


def test_the_int8_rule_is_in_the_numerics_definition():
    from perfbench.ops.base import Op, get

    op = get("MatMulNBits")
    h = op.numerics_definition()
    assert h != Op.numerics_definition(op)
    op.INT8_REFERENCE = op.INT8_REFERENCE + " changed"
    try:
        assert op.numerics_definition() != h
    finally:
        del op.INT8_REFERENCE
