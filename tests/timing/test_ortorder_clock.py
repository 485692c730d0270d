"""benchmarks/reproducibility.py's ortorder reads ORT's K/1 order back from stored blocks: the
clock it assumes must be the one the harness used (Harness._k_first), or the order effect it
reports is a mix of both orders."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from perfbench import PROTOCOL_VERSION
from perfbench.timing.protocol import Harness

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "reproducibility.py"
_spec = importlib.util.spec_from_file_location("reproducibility", _PATH)
rep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rep)


def test_the_current_protocol_is_read_on_the_harness_clock():
    assert rep.clock_of(PROTOCOL_VERSION) == "pair"
    assert (rep.clock_of(4), rep.clock_of(3), rep.clock_of(1)) == ("cell", "replicate", "replicate")
    for reps, rounds in ((8, 3), (5, 3), (3, 4)):
        for r in range(reps):
            for k in range(rounds):
                assert rep.one_first("pair", r, k, rounds) == (not Harness._k_first(r * rounds + k)), (r, k)


@pytest.mark.parametrize("clock", rep.CLOCKS)
def test_flip_log_is_the_log_of_one_first_over_k_first(clock):
    rounds = 3
    for r in range(4):
        ones = [rep.one_first(clock, r, k, rounds) for k in range(rounds)]
        blocks = [2.0 if o else 1.0 for o in ones]  # (1, K) blocks twice the (K, 1) ones
        got = rep._flip_log(blocks, r, clock)
        if all(ones) or not any(ones):
            assert got is None  # one order only in this replicate: nothing to compare
        else:
            assert got == pytest.approx(math.log(2.0))
