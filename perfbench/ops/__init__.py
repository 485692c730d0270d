"""Operators: one file each; importing this package registers them all.

PERFBENCH_EXTRA_OPS (comma-separated module names) loads more op files, e.g. test fixtures."""

import importlib
import os

from perfbench.ops import group_query_attention, multi_head_attention, rotary_embedding, softmax  # noqa: F401
from perfbench.ops.base import REGISTRY, Case, Op, get

for _mod in filter(None, (m.strip() for m in os.environ.get("PERFBENCH_EXTRA_OPS", "").split(","))):
    importlib.import_module(_mod)

__all__ = ["REGISTRY", "Case", "Op", "get"]
