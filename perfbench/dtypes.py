"""Element types by one canonical short name (f32, f16, bf16): numpy dtype, ONNX code, size."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from onnx import TensorProto

from perfbench.errors import UsageError


@dataclass(frozen=True)
class DType:
    name: str  # canonical: f32, f16, bf16
    long_name: str  # float32, float16, bfloat16
    numpy: np.dtype
    onnx: int  # TensorProto code (also the native library's PB_DTYPE_*)
    itemsize: int


F32 = DType("f32", "float32", np.dtype(np.float32), TensorProto.FLOAT, 4)
F16 = DType("f16", "float16", np.dtype(np.float16), TensorProto.FLOAT16, 2)
BF16 = DType("bf16", "bfloat16", np.dtype(ml_dtypes.bfloat16), TensorProto.BFLOAT16, 2)

ALL = (F32, F16, BF16)
_BY_NAME = {}
for _d in ALL:
    _BY_NAME[_d.name] = _d
    _BY_NAME[_d.long_name] = _d
_BY_NAME["fp32"], _BY_NAME["fp16"], _BY_NAME["bfp16"] = F32, F16, BF16


def get(name: str | DType) -> DType:
    if isinstance(name, DType):
        return name
    d = _BY_NAME.get(str(name).lower())
    if d is None:
        raise UsageError(f"unknown dtype {name!r}: expected one of f32, f16, bf16 (or float32, float16, bfloat16)")
    return d


def of_array(a: np.ndarray) -> DType:
    for d in ALL:
        if a.dtype == d.numpy:
            return d
    raise UsageError(f"arrays of dtype {a.dtype} are not supported: expected float32, float16 or bfloat16")
