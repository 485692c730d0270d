"""`perfbench node MODEL.onnx`: one node of a real model, ours against ORT's."""

from __future__ import annotations

import json
import sys

import click

from perfbench.cli import cli


@cli.command()
@click.argument("model", metavar="MODEL.onnx")
@click.option("--data", metavar="DIR",
              help="Inputs in the ONNX test-data layout: DIR/input_0.pb ... (one TensorProto per graph input, in "
                   "order), optionally DIR/output_0.pb ... expected outputs (then they are the reference). "
                   "Default: generated from the declared shapes.")
@click.option("--dim", "dims", multiple=True, metavar="NAME=VALUE",
              help="Value of a symbolic dimension when inputs are generated (repeatable): --dim seq=128.")
@click.option("--threads", type=int, default=1, show_default=True, help="Threads for ours and ORT (intra-op).")
@click.option("--save", "save_to", metavar="DIR",
              help="Write the inputs used and our outputs to a NEW folder DIR (model.onnx, input_K.pb, "
                   "output_K.pb), to replay: perfbench node DIR/model.onnx --data DIR.")
@click.option("--no-time", "no_time", is_flag=True, help="Numerics only: skip the timing.")
@click.option("--replicates", type=int, default=8, show_default=True, help="Timing replicates (interleaved), as a suite's default.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def node(model, data, dims, threads, save_to, no_time, replicates, fmt):
    """Run one node of a real model (a single-node ONNX file) through our kernel and ORT's on the
    same inputs: parity first, then timing by the usual protocol (ours/ORT with a 95% CI, GB/s).

    \b
    The node's opset and attributes are honoured (e.g. Softmax before opset 13 flattens to 2-D
    at `axis`). Reference: the expected outputs in --data when given (they are the
    specification; ORT disagreeing with them is ORT's discrepancy), else ORT's outputs.
    Tolerance: 2 x the dtype's floor, relative error normalized per row (CONTRACTS §8).

    \b
    Exit status:
      0  ours matches the reference
      1  numerics mismatch (the report names the output and the worst element)
      2  usage or input error (bad option, missing/malformed file, not a single node, data that
         does not fit the model)
      3  our library cannot run the node (one line says exactly what is missing); before 4
      4  no reference: ORT cannot run the node and no expected outputs were given

    \b
    Examples:
      perfbench node softmax11.onnx --dim batch=4
      perfbench node cell/model.onnx --data cell/test_data_set_0        # a `perfbench repro` folder
      perfbench node ln.onnx --data ln-data/ --threads 2 --save ln-replay/
    """
    from perfbench import node as node_mod
    from perfbench import suites

    suites.check_limit("replicates", replicates, "--replicates")  # the bound every run has

    def progress(phase):
        if fmt == "text" and sys.stderr.isatty():
            click.echo(f"\r\033[K  {phase} ...", nl=False, err=True)

    rep = node_mod.run(model, data=data, dims=dims, threads=threads, save_to=save_to, timing=not no_time,
                       replicates=replicates, progress=progress)
    if fmt == "text" and sys.stderr.isatty():
        click.echo("\r\033[K", nl=False, err=True)
    if fmt == "json":
        click.echo(json.dumps(rep.to_dict(), indent=2))
    else:
        click.echo(node_mod.render(rep))
    return rep.exit_code
