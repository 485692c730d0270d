"""The build works without AVX2/AVX-512 in the compiler (only the portable path compiled), and
PERFBENCH_ISA forces a path at load."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from perfbench import numerics
from perfbench.kernels_ffi import builder, wrappers
from perfbench.kernels_ffi.library import Library


def test_portable_only_build_runs_correct_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFBENCH_DISABLE_AVX2", "1")
    monkeypatch.setenv("PERFBENCH_DISABLE_AVX512", "1")
    info = builder.build(build_root=tmp_path)
    assert info.isa_compiled == ["portable", "portable16"]
    assert not any("PB_HAVE_AVX" in f for f in info.flags)
    lib = Library(info)
    assert lib.isa_compiled == ["portable", "portable16"]
    assert lib.isa_active == "portable"
    x = np.random.default_rng(0).standard_normal((5, 37)).astype(np.float32)
    y = np.empty_like(x)
    wrappers.softmax(lib, x, y, 2).run()
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    assert numerics.error(y, e / e.sum(-1, keepdims=True), 37) <= numerics.FLOORS["f32"]


def test_perfbench_isa_forces_a_path_at_load():
    code = "from perfbench.kernels_ffi import load; print(load().isa_active)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**__import__("os").environ, "PERFBENCH_ISA": "portable"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "portable"
