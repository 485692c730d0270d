"""The checks every op file's from_node runs on the node it is handed (`perfbench node`), one
wording for all of them. `what` names the node in every message (e.g. "Add (opset 14)",
"Trilu node"). A node that is not valid ONNX is a UsageError; a valid one that our kernels do
not implement is NodeUnsupported (exit 3)."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.ops.base import NodeInfo, NodeUnsupported

FLOAT_DTYPES = ("f32", "f16", "bf16")


def node_float_dtype(node: NodeInfo, what: str) -> str:
    """The node's float element type, or NodeUnsupported."""
    if node.dtype not in FLOAT_DTYPES:
        first = node.inputs[0][0] if node.inputs and node.inputs[0] is not None else None
        name = node.dtype or (np.dtype(first).name if first is not None else "unknown")
        raise NodeUnsupported(f"{what}: element type {name} is not implemented (float32, float16, bfloat16 are)")
    return node.dtype


def node_inputs(node: NodeInfo, what: str, least: int, most: int | None = None) -> list:
    """The node's inputs [(dtype, shape) or None (absent)] after checking them (UsageError): at
    most `most` input slots (an empty trailing one counts: ORT refuses such a node), the first
    `least` present. The list is padded with None up to `most` (most None: no upper bound)."""
    raw = len(node.inputs)
    want = str(least) if least == most else f"{least}..{most}" if most is not None else f"at least {least}"
    plural = "input" if want == "1" else "inputs"
    if (most is not None and raw > most) or raw < least:
        raise UsageError(f"{what}: {want} {plural} expected, the node has {raw}")
    for i in range(least):
        if node.inputs[i] is None:
            raise UsageError(f"{what}: input {i} is required (the node leaves it empty)")
    n = raw
    while n and node.inputs[n - 1] is None:
        n -= 1
    return list(node.inputs[:n]) + [None] * ((most if most is not None else n) - n)


def check_outputs(node: NodeInfo, what: str, count: int = 1) -> None:
    """Output 0 is there and the node has at most `count` outputs (UsageError)."""
    if not node.outputs or not node.outputs[0]:
        raise UsageError(f"{what}: output 0 is required")
    if len(node.outputs) > count:
        raise UsageError(f"{what}: at most {count} output(s) expected, the node has {len(node.outputs)}")


def wanted(node: NodeInfo, index: int) -> bool:
    """Whether the node asks for output `index`."""
    return index < len(node.outputs) and bool(node.outputs[index])


def same_float_inputs(node: NodeInfo, what: str, indices, error: type[Exception] = UsageError) -> None:
    """The given (present) inputs have the node's float type; else `error`: UsageError where ONNX
    requires one type, NodeUnsupported where it allows mixed types and our kernels do not."""
    want = dtypes.get(node.dtype).numpy
    for i in indices:
        if node.inputs[i] is not None and np.dtype(node.inputs[i][0]) != want:
            got = np.dtype(node.inputs[i][0])
            if error is NodeUnsupported:
                raise error(f"{what}: input {i} of type {got} with input 0 of type {np.dtype(want)} is not "
                            "implemented (mixed element types)")
            raise error(f"{what}: input {i} is {got}, input 0 is {np.dtype(want)}: ONNX requires one element type "
                        "for them")


def check_attrs(node: NodeInfo, what: str, known: tuple) -> None:
    """Every attribute of the node is one we implement (NodeUnsupported)."""
    for a in node.attrs:
        if a not in known:
            raise NodeUnsupported(f"{what}: attribute {a!r} is not implemented (known: {', '.join(known)})")


def node_shape(node: NodeInfo, index: int, what: str) -> tuple:
    """Input `index`'s shape; an empty tensor is NodeUnsupported."""
    shape = tuple(int(d) for d in node.inputs[index][1])
    if any(d == 0 for d in shape):
        raise NodeUnsupported(f"{what}: an empty input {index} of shape {shape} is not implemented")
    return shape


def node_axis(node: NodeInfo, what: str, rank: int, default: int | None = 0) -> int:
    """The axis attribute in [0, rank) (UsageError if absent without a default, or out of range)."""
    axis = node.attr("axis", default)
    if axis is None:
        raise UsageError(f"{what}: no axis attribute (ONNX requires it)")
    if not -rank <= int(axis) < rank:
        raise UsageError(f"{what}: axis={axis} is outside [-{rank}, {rank}) for rank {rank}")
    return int(axis) % rank
