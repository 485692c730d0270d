"""com.microsoft MatMulNBits (issue 19): Y (M, N) = A (M, K) @ W + bias, W a (K, N) weight
quantized per block of block_size along K to 2, 4 or 8 bits (layout and references:
perfbench/ops/_nbits.py). B, scales, zero points and bias are the model's constants in every cell
(initializers: ORT prepacks them at session creation, and only then takes its int8 path at
accuracy 4); zero points packed (uint8), unpacked (the activation's float type) or absent.

accuracy_level 0: f32 products (ORT 1.31.1 runs levels 0-3 as dequantize + f32 on x86).
accuracy_level 4: A quantized per row and block to int8 as ORT quantizes it, integer dot products
(vpdpbusd); judged against the second reference, reference_int8_a (the float64 product over A so
quantized: the unquantized oracle cannot judge it, ORT itself is about 1e-2 away from it). Its
error against the unquantized reference is stored beside (plain_oracle: err_ours_plain,
err_ort_plain)."""

from __future__ import annotations

import hashlib

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi.matmul_nbits import matmul_nbits, pack_b
from perfbench.ops import _nbits as nb
from perfbench.ops import _node_helpers as nh
from perfbench.ops.base import (
    Case,
    GraphSpec,
    Mutant,
    NodeBinding,
    NodeInfo,
    NodeUnsupported,
    Op,
    Param,
    register,
    tail_len,
)

ZP_FORMS = ("packed", "float", "none")
# rows of A up to which a cell may be judged against bandwidth (bound_for: at accuracy 0 only
# where its FMAs take the host less time than its bytes); above it compute
MEMORY_BOUND_MAX_M = 1


def _dims(case: Case) -> tuple:
    p = case.p
    kb = nb.k_blocks(p["k"], p["block_size"])
    return p["m"], p["k"], p["n"], p["bits"], p["block_size"], kb


def _ref(case: Case, x: dict, a=None, b=None, scales=None, zp="same", half_even=True, plain=False) -> np.ndarray:
    """The cell's float64 reference (accuracy 4: over A quantized to int8 as ORT does it, unless
    `plain`: the op's stated semantics) on its inputs, with any of A, B, scales, zero points or the
    int8 rounding replaced (the mutants)."""
    m, k, n, bits, bs, _ = _dims(case)
    args = (x["A"] if a is None else a, x["B"] if b is None else b, x["scales"] if scales is None else scales,
            x.get("zero_points") if isinstance(zp, str) else zp, x.get("bias"))
    if case.p["accuracy_level"] == 4 and not plain:
        return nb.reference_int8_a(*args, k=k, bits=bits, block_size=bs, half_even=half_even)
    return nb.reference(*args, k=k, bits=bits, block_size=bs)


def _zp_float(case: Case, x: dict) -> np.ndarray:
    m, k, n, bits, bs, kb = _dims(case)
    return nb.zero_points(x.get("zero_points"), n, kb, bits)


def _m_fields_swapped(op, case, x):
    # the bit fields of each byte read in reverse order (4 bits: the nibbles swapped)
    bits, per = case.p["bits"], 8 // case.p["bits"]
    b = np.asarray(x["B"], np.uint8)
    q = nb.unpack_bits(b, bits, b.shape[-1] * per).reshape(*b.shape, per)[..., ::-1]
    return {"Y": _ref(case, x, b=nb.pack_bits(q.reshape(*b.shape[:-1], -1), bits))}


def _m_neighbour_scale(op, case, x):
    m, k, n, bits, bs, kb = _dims(case)
    s = np.asarray(x["scales"], np.float64).reshape(n, kb)
    return {"Y": _ref(case, x, scales=np.roll(s, 1, axis=1))}


def _m_zp_ignored(op, case, x):
    return {"Y": _ref(case, x, zp=np.zeros_like(_zp_float(case, x)))}


def _m_zp_off_by_one(op, case, x):
    return {"Y": _ref(case, x, zp=_zp_float(case, x) + 1.0)}


def _m_k_tail(op, case, x):
    a = np.array(x["A"], np.float64)
    a[:, a.shape[1] - tail_len(a.shape[1]):] = 0.0
    return {"Y": _ref(case, x, a=a)}


def _m_round_half_away(op, case, x):
    return {"Y": _ref(case, x, half_even=False)}


def plant_ties(a: np.ndarray, block_size: int) -> None:
    """Row 0's first block: max |a| = 127 (so A's int8 scale is 1) and the rest x.5 values, each a
    rounding tie (halves to even, as ORT rounds them; a kernel rounding halves away from zero, or
    truncating, is off by one on many of them)."""
    n = min(block_size, a.shape[1])
    ties = (np.arange(1, n) % 8 + 0.5) * np.where(np.arange(1, n) % 2 == 0, 1.0, -1.0)
    a[0, 0], a[0, 1:n] = 127.0, ties


@register
class MatMulNBits(Op):
    name = "MatMulNBits"
    kernel = "matmul_nbits"
    params = (
        Param("m", int, None, minimum=1, help="rows of A (tokens)"),
        Param("k", int, None, minimum=1, help="the inner dimension (K attribute)"),
        Param("n", int, None, minimum=1, help="output features (N attribute)"),
        Param("bits", int, 4, choices=(2, 4, 8), help="bits per weight"),
        Param("block_size", int, 32, choices=(16, 32, 64, 128, 256), help="weights per scale along K"),
        Param("zp", str, "packed", choices=ZP_FORMS,
              help="zero points: packed uint8, float (the activation's type), or none (2^(bits-1))"),
        Param("bias", int, 0, choices=(0, 1), help="1: a bias input"),
        Param("accuracy_level", int, 0, choices=(0, 4),
              help="0: f32 products; 4: A quantized per block to int8, integer dot products (judged against "
                   "the int8-activation reference)"),
    )
    bound = "compute"
    kernel_optional_args = ("zero_points", "bias", "b_packed")  # b_packed NULL: the call regroups B itself
    floors = {"f32": 1e-6, "f16": 1e-3, "bf16": 8e-3}
    test_cases = (
        {"m": 1, "k": 64, "n": 24},
        {"m": 3, "k": 100, "n": 9, "bias": 1},  # K tail inside the last block of 32
        {"m": 2, "k": 96, "n": 5, "bits": 2, "block_size": 16, "zp": "float"},
        {"m": 2, "k": 128, "n": 7, "bits": 8, "block_size": 64, "zp": "none"},
        {"m": 1, "k": 256, "n": 40, "block_size": 128},
        {"m": 2, "k": 256, "n": 300},  # past 2 x the grain: 2 threads split the columns
        # accuracy 4: units spanning several blocks (AVX-512 64 bytes: 4-bit block 32 = 4 blocks), a
        # K tail, 8-bit, a block spanning two units (4-bit 256 = 128 bytes), float zero points
        {"m": 1, "k": 320, "n": 24, "accuracy_level": 4},
        {"m": 3, "k": 100, "n": 9, "bias": 1, "accuracy_level": 4},
        {"m": 2, "k": 128, "n": 7, "bits": 8, "block_size": 16, "accuracy_level": 4},
        {"m": 2, "k": 512, "n": 5, "block_size": 256, "zp": "float", "accuracy_level": 4},
        {"m": 1, "k": 192, "n": 6, "bits": 2, "block_size": 32, "zp": "none", "accuracy_level": 4},
    )
    mutants = (
        Mutant("bit fields of a byte in reverse order", _m_fields_swapped, lambda case: case.p["bits"] < 8),
        Mutant("a block's scale applied to its neighbour", _m_neighbour_scale,
               lambda case: nb.k_blocks(case.p["k"], case.p["block_size"]) > 1),
        Mutant("zero point ignored", _m_zp_ignored),
        Mutant("zero point off by one", _m_zp_off_by_one),
        Mutant("K tail dropped", _m_k_tail, lambda case: case.p["k"] > 1),
        Mutant("int8 activations rounded half away from zero", _m_round_half_away,
               lambda case: case.p["accuracy_level"] == 4 and min(case.p["k"], case.p["block_size"]) > 2),
    )

    def validate(self, case: Case, where: str) -> None:
        if case.p["k"] * case.p["n"] > 2**34:
            raise UsageError(f"{where}: MatMulNBits k x n = {case.p['k'] * case.p['n']}: at most 2^34 weights")

    def _zp_spec(self, case: Case) -> tuple:
        m, k, n, bits, bs, kb = _dims(case)
        zp = case.p["zp"]
        if zp == "packed":
            return ("zero_points", "uint8", (n, -(-kb * bits // 8)))
        if zp == "float":
            return ("zero_points", "float", (n, kb))
        return ("", "float", ())

    def graph(self, case: Case) -> GraphSpec:
        m, k, n, bits, bs, kb = _dims(case)
        zp = self._zp_spec(case)
        inputs = [("A", "float", (m, k)), ("B", "uint8", (n, kb, bs * bits // 8)), ("scales", "float", (n, kb)), zp]
        if case.p["bias"]:
            inputs += [("", "int32", ()), ("bias", "float", (n,))]
        inits = tuple(name for name, _, _ in inputs[1:] if name)
        attrs = {"K": k, "N": n, "bits": bits, "block_size": bs, "accuracy_level": case.p["accuracy_level"]}
        return GraphSpec("MatMulNBits", "com.microsoft", 1, inputs, [("Y", (m, n))], attrs=attrs, initializers=inits)

    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        m, k, n, bits, bs, kb = _dims(case)
        b, s, z = nb.random_weights(rng, n, k, bits=bits, block_size=bs, packed_zp=case.p["zp"] == "packed")
        # weights of about 1/sqrt(K): Y ~ O(1) whatever K
        s = (s.astype(np.float64) * 2.0 / np.sqrt(k)).astype(dtype.numpy)
        A = rng.standard_normal((m, k))
        A[:, -1] *= 8.0  # planted: the last k of every row weighs 8x (a dropped K tail shows)
        if case.p["accuracy_level"] == 4:
            plant_ties(A, bs)
        out = {"A": np.ascontiguousarray(A.astype(dtype.numpy)), "B": b, "scales": s}
        if case.p["zp"] == "packed":
            out["zero_points"] = z
        elif case.p["zp"] == "float":
            out["zero_points"] = z.astype(dtype.numpy)
        if case.p["bias"]:
            out["bias"] = rng.standard_normal(n).astype(dtype.numpy)
        return out

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        if device != "cpu":
            raise UsageError(f"MatMulNBits runs on the CPU only, not {device}")
        m, k, n, bits, bs, kb = _dims(case)
        acc = case.p["accuracy_level"]
        # B and its zero points are initializers in every cell: at accuracy 4 regrouped once here
        # (packed zero points a byte a block with B), untimed, as ORT prepacks them at session creation
        zp = inputs.get("zero_points")
        packed = pack_b(lib, inputs["B"], n=n, k=k, bits=bits, block_size=bs,
                        zero_points=zp if zp is not None and zp.dtype == np.uint8 else None) if acc == 4 else None
        return matmul_nbits(lib, inputs["A"], inputs["B"], inputs["scales"], outputs["Y"], k=k, n=n, bits=bits,
                            block_size=bs, zero_points=zp, bias=inputs.get("bias"),
                            accuracy_level=acc, packed_b=packed, threads=threads)

    def oracle(self, case: Case, inputs: dict) -> dict:
        return {"Y": _ref(case, inputs)}

    def plain_oracle(self, case: Case, inputs: dict) -> dict | None:
        """Accuracy 4: the unquantized reference (A as given), whose error the issue keeps in the
        table next to the judged one against reference_int8_a."""
        if case.p["accuracy_level"] != 4:
            return None
        return {"Y": _ref(case, inputs, plain=True)}

    # the second reference is part of the numerics definition: its rule changes, the hash changes
    INT8_REFERENCE = ("accuracy 4: reference_int8_a v2 (per row and block, f32 max|a| / 127, half to even, saturated; "
                      "a NaN product a x (127 / max) quantized to 0)")

    def numerics_definition(self) -> str:
        base = super().numerics_definition()
        return hashlib.sha256(f"{base}|{self.INT8_REFERENCE}".encode()).hexdigest()[:16]

    def ort_departure(self, case: Case) -> str:
        p = case.p
        if p["accuracy_level"] == 4 and not nb.ort_runs_int8(p["bits"], p["block_size"], p["zp"], True):
            return ("ORT 1.31.1 runs accuracy_level 4 as f32 here (float zero points, or 2 bits at block 16 or 256): "
                    "A is not quantized, so ORT departs from the int8-activation reference")
        return ""

    def row_sizes(self, case: Case) -> dict:
        return {"Y": case.p["n"]}

    def flops(self, case: Case) -> float:
        m, k, n, *_ = _dims(case)
        return 2.0 * m * n * k

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        m, k, n, bits, bs, kb = _dims(case)
        weights = n * kb * bs * bits / 8 + n * kb * dtype.itemsize
        zp = {"packed": n * -(-kb * bits // 8), "float": n * kb * dtype.itemsize, "none": 0}[case.p["zp"]]
        return float(weights + zp + (m * k + m * n + n * case.p["bias"]) * dtype.itemsize)

    def compute_peak(self, case: Case, dtype: str) -> str:
        return "fma_f32"

    def bound_for(self, case: Case) -> str:
        """M = 1 at accuracy 0: whichever of its f32 FMAs and its bytes takes the host longer (the
        issue's roofline; 4-bit weights are compute-bound on AVX2: 2 x 4096^2 flop at Zen 3's
        102.7 GFLOP/s take 327 us, its 10.8 MB at the L3's 79 GB/s 136 us). At accuracy 4 memory:
        no integer dot peak is probed, so its compute bound is not known and its share is of the
        bandwidth ceiling only. M > 1: compute."""
        if case.p["m"] > MEMORY_BOUND_MAX_M:
            return "compute"
        return "memory" if case.p["accuracy_level"] == 4 else "roofline"

    node_types = (("com.microsoft", "MatMulNBits"),)

    def from_node(self, node: NodeInfo) -> NodeBinding:
        """com.microsoft MatMulNBits: A (..., K) (leading dims flattened into M), B, scales, zero
        points packed or float, bias. accuracy_level 1-3 as 0 (f32; so ORT 1.31.1 runs them on x86),
        4 as int8 activations. Where ORT does not take its int8 path at 4 (nb.ort_runs_int8: weights
        not initializers, float zero points, 2 bits at block 16 or 256) it computes in f32, so its
        error against the int8 reference is large (ort-discrepancy where the gate sees it). Declined
        (exit 3): g_idx, bits other than 2/4/8, block sizes outside 16-256."""
        what = "MatMulNBits"
        ins = nh.node_inputs(node, what, 3, 6)
        nh.check_outputs(node, what)
        nh.check_attrs(node, what, ("K", "N", "bits", "block_size", "accuracy_level"))
        at = node.attrs
        for req in ("K", "N", "block_size"):
            if req not in at:
                raise UsageError(f"{what}: the required attribute {req} is missing")
        k, n, bits, bs, acc = int(at["K"]), int(at["N"]), int(at.get("bits", 4)), int(at["block_size"]), \
            int(at.get("accuracy_level", 0))
        if bits not in (2, 4, 8):
            raise NodeUnsupported(f"{what} bits={bits}: ORT 1.31.1 runs 2, 4 and 8 only, as do we")
        if bs not in (16, 32, 64, 128, 256):
            raise NodeUnsupported(f"{what} block_size={bs}: ORT 1.31.1 runs powers of two from 16 to 256, and so does this mapping")
        if len(ins) > 4 and ins[4] is not None:
            raise NodeUnsupported(f"{what} with g_idx (deprecated; per-k block indices): not implemented")
        a = nh.node_shape(node, 0, what)
        if len(a) < 2 or a[-1] != k:
            raise UsageError(f"{what}: A {a} must be (..., K={k})")
        zp = "none"
        if len(ins) > 3 and ins[3] is not None:
            zp = "packed" if np.dtype(ins[3][0]) == np.uint8 else "float"
        bias = int(len(ins) > 5 and ins[5] is not None)
        m = int(np.prod(a[:-1]))
        acc = 4 if acc == 4 else 0
        case = self.make_case({"m": m, "k": k, "n": n, "bits": bits, "block_size": bs, "zp": zp, "bias": bias,
                               "accuracy_level": acc}, "perfbench node")
        inputs = {"A": 0, "B": 1, "scales": 2}
        if zp != "none":
            inputs["zero_points"] = 3
        if bias:
            inputs["bias"] = 5
        return NodeBinding(case, inputs, {"Y": (0, tuple(a[:-1]) + (n,))})
