"""Operators: one file each; importing this package registers them all (every module of this
package whose name does not start with an underscore, except base and ort).

PERFBENCH_EXTRA_OPS (comma-separated module names) loads more op files, e.g. test fixtures."""

import importlib
import os
import pkgutil

from perfbench.ops.base import REGISTRY, Case, Op, get

_NOT_OPS = {"base", "ort"}
for _info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
    if not _info.name.startswith("_") and _info.name not in _NOT_OPS:
        importlib.import_module(f"{__name__}.{_info.name}")

for _mod in filter(None, (m.strip() for m in os.environ.get("PERFBENCH_EXTRA_OPS", "").split(","))):
    importlib.import_module(_mod)

__all__ = ["REGISTRY", "Case", "Op", "get"]
