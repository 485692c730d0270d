"""`perfbench node MODEL.onnx`: one node of a real model, our kernel against ORT's on exactly
that node: parity first, then timing by the usual protocol.

The model must hold exactly one node. Its inputs come from a test-data folder in the standard
ONNX layout (`input_K.pb` per graph input in order, optionally `output_K.pb` expected outputs per
graph output), or are generated from the declared shapes by the op's own seeded generator
(symbolic dimensions need --dim NAME=VALUE). Initializers are data: they are used as given (and
bound as inputs in the timed graphs, as in every cell).

Reference (what "matches" means): the expected outputs when given -- they are the
specification: ours is judged against them alone, and ORT disagreeing with them is ORT's
discrepancy; otherwise ORT's outputs on the same inputs. Tolerance: 2 x the dtype's floor
(CONTRACTS §8 error: relative, normalized by the RMS of each row), because the reference is
itself rounded to the dtype. The float64 oracle of the op (where it has one) is reported as well.

Exit codes (CONTRACTS §6): 0 ours matches; 1 a numerics mismatch; 2 usage or input errors; 3 our
library cannot run the node (one line says what is missing; takes precedence over 4); 4 no
reference (ORT cannot run the node and no expected outputs were given).

The stages, one module each: load (the model and its data), bind (the node onto one of our ops),
judge (ours against the reference; timing), report (--save, the terminal text); run() below
strings them together.
"""

from __future__ import annotations

from perfbench import dtypes
from perfbench.errors import NativeError, UsageError
from perfbench.node.bind import MAX_GENERATED_BYTES, SEED, NodeOp, OursCannot, bind, generate_inputs
from perfbench.node.judge import (
    DEFAULT_REPLICATES,
    EXIT_MISMATCH,
    EXIT_NO_REFERENCE,
    EXIT_OK,
    EXIT_OURS_CANNOT,
    EXIT_USAGE,
    TOL_FACTOR,
    OutputCheck,
    Report,
    judge,
    run_ort,
    time_node,
)
from perfbench.node.load import Problem, load, load_model, node_info, parse_dims, read_tensor, read_tensor_proto
from perfbench.node.report import check_save, render, save

__all__ = ["DEFAULT_REPLICATES", "EXIT_MISMATCH", "EXIT_NO_REFERENCE", "EXIT_OK", "EXIT_OURS_CANNOT", "EXIT_USAGE",
           "MAX_GENERATED_BYTES", "SEED", "TOL_FACTOR", "NodeOp", "OursCannot", "OutputCheck", "Problem", "Report",
           "bind", "check_save", "generate_inputs", "judge", "load", "load_model", "node_info", "parse_dims",
           "read_tensor", "read_tensor_proto", "render", "run", "run_ort", "save", "time_node"]


def run(model: str, data: str | None = None, dims=None, threads: int = 1, save_to: str | None = None,
        timing: bool = True, replicates: int = DEFAULT_REPLICATES, seed: int = SEED, lib=None,
        progress=lambda s: None) -> Report:
    """The whole command; returns the report (its exit_code is the command's)."""
    if not isinstance(threads, int) or not 1 <= threads <= 256:
        raise UsageError(f"--threads {threads}: expected an integer in 1..256")
    if replicates < 2:
        raise UsageError("--replicates must be >= 2 (a CI needs at least two replicates)")
    prob = load(model, data, parse_dims(dims))
    if save_to is not None:  # fail before any work, not after it
        check_save(save_to, data)
    rep = Report(node=prob.node_label(), threads=threads, notes=list(prob.notes))
    info = node_info(prob)
    rep.dtype = info.dtype
    op = binding = nop = None
    try:
        op, binding = bind(prob, info)
        rep.op, rep.case = op.name, binding.case.case_id
        nop = NodeOp(prob, info, op, binding)
        nop.graph()  # every input and output type must be one we can bind
    except OursCannot as e:
        op = binding = nop = None
        rep.ours_status, rep.ours_message = "unsupported", str(e)
    if op is not None:
        try:
            generate_inputs(prob, op, binding, info, seed)
        except MemoryError as e:
            raise UsageError("not enough memory to generate the inputs: smaller --dim values, or --data") from e
    for name in prob.node.input:
        a = prob.initializers.get(name, prob.arrays.get(name)) if name else None
        if a is not None:
            src = "initializer" if name in prob.initializers else "generated" if name in prob.generated else "given"
            rep.inputs.append((name, src, str(a.dtype), list(a.shape)))
    if op is None and any(n not in prob.arrays for n, _, _ in prob.graph_inputs):
        rep.notes.append("inputs were not generated (our library cannot run the node), so ORT was not run"
                         + ("; nothing was saved" if save_to else ""))
        rep.exit_code = EXIT_OURS_CANNOT
        return rep

    progress("ort: numerics")
    rep.ort_status, rep.ort_message, ort_out = run_ort(prob, threads)
    if op is None:
        if save_to:
            rep.notes.append("nothing was saved: our library cannot run the node")
        rep.exit_code = EXIT_OURS_CANNOT
        return rep

    if lib is None:
        from perfbench.kernels_ffi import load as load_lib
        lib = load_lib()
    dt = dtypes.get(info.dtype)
    inputs = {f"i{k}": prob.arrays.get(n, prob.initializers.get(n)) for k, n in enumerate(prob.node.input) if n}
    ours = nop.new_outputs(None, dt.numpy, inputs)
    progress("ours: numerics")
    try:
        nop.prepare_ours(lib, None, {k: v.copy() for k, v in inputs.items()}, ours, threads).run()
    except NativeError as e:
        # our kernel declining an argument it does not implement: exit 3; any other status is ours failing
        rep.ours_status = "unsupported" if e.status == 2 else "error"
        rep.ours_message = f"our kernel {e.kernel}: {e.message}"
        rep.exit_code = EXIT_OURS_CANNOT if e.status == 2 else EXIT_MISMATCH
        return rep
    except UsageError as e:  # the op's wrapper refusing what its from_node accepted: ours failing
        rep.ours_status, rep.ours_message = "error", str(e)
        rep.exit_code = EXIT_MISMATCH
        return rep
    judge(prob, nop, ours, ort_out, rep, op.floor(dt.name))
    if rep.exit_code == EXIT_MISMATCH:
        rep.ours_status = "mismatch"
    if save_to is not None:
        reference = prob.expected if prob.expected is not None else ort_out
        rep.saved = save(prob, ours, reference, rep.exit_code == EXIT_OK, save_to, data)
        rep.saved_ours_as_expected = rep.exit_code == EXIT_OK
    if timing and rep.exit_code == EXIT_OK:
        progress("timing")
        rep.timing = time_node(lib, nop, prob, threads, replicates, progress=progress)
    return rep
