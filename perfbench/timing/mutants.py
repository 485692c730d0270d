"""`perfbench mutants`: the numerics gate's negative controls, shown.

For each (case, dtype) of a suite (its numerics-only odd shapes and its quick shapes), the same
inputs the harness would make go through the float64 oracle, through ORT (in the cell's dtype,
else the op's declared substitute) and through our kernel; then every mutant of the op that
applies to the case (the oracle with one realistic bug switched on, stored in the cell's dtype)
is judged by the same gate. A mutant the gate accepts is a hole in the gate."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfbench import dtypes, numerics
from perfbench.ops import ort as ortlib


@dataclass
class Verdict:
    op: str
    case_id: str
    dtype: str
    subject: str  # a mutant's name, or "ours" (the positive control)
    err: float
    tol: float
    rejected: bool

    @property
    def ok(self) -> bool:
        """What should happen did: mutants rejected, our kernel accepted."""
        return self.rejected if self.subject != "ours" else not self.rejected


def judge(lib, op, case, dtype: str, seed: int) -> list[Verdict]:
    """Our kernel and every applicable mutant of `op` on one (case, dtype), through the gate."""
    dt = dtypes.get(dtype)
    inputs = op.make_inputs(case, dt, np.random.default_rng(seed))
    x64 = op.oracle_inputs(case, inputs)
    oracle = op.oracle(case, x64)
    rows = op.row_sizes(case)
    floor = op.floor(dt.name)
    ran = ortlib.run_case(op, case, inputs, dt)
    ort_out = ran[2] if ran else None
    res = []
    mine = op.private_inputs(case, inputs)
    ours = op.new_outputs(case, dt.numpy, mine)
    op.prepare_ours(lib, case, mine, ours, 1).run()
    g = numerics.gate(ours, ort_out, oracle, rows, floor)
    res.append(Verdict(op.name, case.case_id, dt.name, "ours", g.err_ours, g.tol, not g.ours_ok))
    for m in op.mutants:
        if not m.applies(case):
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            bad = {k: np.asarray(v).astype(dt.numpy).astype(np.float64) for k, v in m.outputs(op, case, x64).items()}
        g = numerics.gate(bad, ort_out, oracle, rows, floor)
        res.append(Verdict(op.name, case.case_id, dt.name, m.name, g.err_ours, g.tol, not g.ours_ok))
    return res
