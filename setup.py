"""Build the native kernel library at install time (`pip install -e .`).

The library is also rebuilt automatically by the first perfbench command that runs after a
native source changed; this hook only makes a broken compiler fail loudly at install."""

import importlib.util
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildNative(build_py):
    def run(self):
        sys.path.insert(0, ROOT)
        spec = importlib.util.spec_from_file_location(
            "perfbench_native_builder", os.path.join(ROOT, "perfbench", "kernels_ffi", "builder.py"))
        builder = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(builder)
        info = builder.build(log=lambda m: print(m, file=sys.stderr))
        print(f"native library: {info.path} (ISA paths: {', '.join(info.isa_compiled)})", file=sys.stderr)
        super().run()


setup(cmdclass={"build_py": BuildNative})
