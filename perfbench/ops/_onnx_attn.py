"""Shared pieces of the ai.onnx Attention and RotaryEmbedding op files (opset 23): float
attributes carried as string case parameters. (Their float64 oracle is onnx.reference on the op's
single-node graph: _reference.evaluate_spec.)"""

from __future__ import annotations

import numpy as np


def float_param(value: str, what: str, where: str) -> float:
    """A float attribute carried as a string parameter (case ids stay exact: '2', '0.125')."""
    from perfbench.errors import UsageError

    try:
        v = float(value)
    except ValueError:
        raise UsageError(f"{where}: {what}={value!r} is not a number") from None
    if not np.isfinite(v):
        raise UsageError(f"{where}: {what}={value!r} must be finite")
    return v


def float_text(v: float) -> str:
    """The parameter string of a float attribute: repr without a trailing '.0' ('2', '0.125')."""
    text = repr(float(v))
    return text[:-2] if text.endswith(".0") else text
