"""The command line: the only layer that prints or exits. Exit codes follow CONTRACTS §6:
0 done; 1 a verdict failed (run: any cell of ours mismatch/error/crashed/timeout); 2 usage or
input error; 5 a remote service failed; 130/143 interrupted by SIGINT/SIGTERM (what finished is
kept)."""

from __future__ import annotations

import sys

import click

from perfbench import __version__
from perfbench.errors import Interrupted, PerfbenchError

PROCESSES_HELP = ("Worker processes each cell's replicates are spread over (default: the suite's, 3): a fresh "
                  "process samples what one cannot (thread placement, library mappings), and the CI includes "
                  "that spread. 1 = every replicate in one process.")
DB_HELP = "Results database: any SQLAlchemy URL or a SQLite file path [env PERFBENCH_DB; default sqlite:///results.db]."


def split_list(values) -> list | None:
    """Options given as repeated flags and/or comma lists: --threads 1,2 --threads 4."""
    out = []
    for v in values or ():
        out += [x.strip() for x in str(v).split(",") if x.strip()]
    return out or None


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="perfbench")
def cli():
    """perfbench: our native kernels measured against ONNX Runtime, side by side, numerics first.

    \b
    Start here:
      perfbench run --suite attention --quick    a one-minute taste (partial run)
      perfbench run --suite attention            the whole suite
      perfbench show latest --suite attention    the table again, or as markdown/json/csv
      perfbench list --suite attention           what a run would measure, without measuring

    Every cell runs our kernel and ORT's on the same input bytes, checks both against a
    float64 oracle (a mismatch fails the cell, never times it), then times both by the same
    definition and reports ours/ORT with a 95% CI. Results go to results.db (or --db URL).
    """


def main() -> None:
    try:
        rv = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("\naborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except Interrupted as e:
        click.echo(f"\n{e}; finished cells are kept", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("\ninterrupted; finished cells are kept", err=True)
        sys.exit(130)
    except PerfbenchError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(e.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)


import perfbench.cli.bot  # noqa: E402,F401  (registers `perfbench bot`)
from perfbench.cli import commands, compare_cmds, dashboard_cmd, node_cmd, tickets_cmds  # noqa: E402,F401  (register the commands: run, show, ...; ab, compare, calibrate, calibration, render; tickets, score; dashboard; node)
