"""perfbench commands that compare base with head: ab, compare, calibrate, calibration, render."""

from __future__ import annotations

import json
import sys

import click

from perfbench import suites
from perfbench.cli import DB_HELP, PROCESSES_HELP, cli, split_list
from perfbench.cli.commands import REPLICATES_HELP, TerminalUI, bounded, emit, suite_options
from perfbench.errors import UsageError

CMP_FORMATS = ["table", "markdown", "json"]
MAX_DOCUMENT_BYTES = 64 * 2**20  # `render` reads untrusted artifacts: a bound on what it parses


def _effect(value: str) -> float:
    """--min-effect: "3%" or "0.03"."""
    try:
        v = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a percentage (e.g. 3% or 0.03)") from None
    if not 0 < v < 1:
        raise click.BadParameter(f"{value!r} must be between 0% and 100%")
    return v


def _cmp_options(f):
    f = click.option("-o", "--output", metavar="FILE", help="Write to FILE instead of stdout.")(f)
    f = click.option("--format", "fmt", type=click.Choice(CMP_FORMATS), default="table", show_default=True,
                     help="table (terminal), markdown (the PR comment) or json (the versioned document).")(f)
    f = click.option("--db", metavar="URL", help=DB_HELP)(f)
    f = click.option("--calibration", "calibration", metavar="FILE", type=click.Path(dir_okay=False),
                     help="Noise calibration from `perfbench calibration export` (default: the newest in the "
                          "database for this host class; none: the stated default sigma_b).")(f)
    f = click.option("--q", "q", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05,
                     show_default=True, help="False discovery rate of the Benjamini-Hochberg procedure.")(f)
    f = click.option("--min-effect", default="3%", show_default=True, metavar="PCT",
                     help="Minimum effect m: 🔴 needs confidence that the change exceeds it.")(f)
    return f


def _show(doc: dict, fmt: str, output: str | None) -> int:
    from perfbench.compare import render_change

    if fmt == "json":
        from perfbench.compare.escape import json_text

        emit(json_text(json.dumps(doc, indent=1, ensure_ascii=False)) + "\n", output)
    elif fmt == "markdown":
        emit(render_change.markdown(doc), output)
    else:
        emit(render_change.terminal(doc, color=sys.stdout.isatty() and not output) + "\n", output)
    return render_change.exit_code(doc)


AB_PROCESSES_HELP = (f"{PROCESSES_HELP} At most {suites.AB_MAX_PROCESSES} here (each worker loads both builds): "
                     f"more are capped, with a note.")


@cli.command()
@click.option("--base-rev", required=True, metavar="REV",
              help="The base: a git revision (branch, tag, sha, HEAD~1, the PR's merge base).")
@click.option("--head-rev", metavar="REV", help="The head: a git revision [default: the working tree, as it is].")
@suite_options
@click.option("--replicates", type=int, metavar="N", callback=bounded("replicates"), help=REPLICATES_HELP)
@click.option("--processes", type=int, metavar="P", callback=bounded("processes"), help=AB_PROCESSES_HELP)
@_cmp_options
def ab(base_rev, head_rev, suite, filters, quick, threads, dtype, cache, spin, device, replicates, processes, min_effect,
       q, calibration, db, fmt, output):
    """Measure base and head of our native library side by side, on this machine, now.

    Each revision's native library is built from that revision into its own path and loaded
    next to the other with its own header; the harness, op files and suite come from this
    checkout. Every cell runs base, head and ORT in blocks that rotate (base, head, ORT; head,
    ORT, base; ... a Williams design: each side follows each other equally often) so machine
    drift and carry-over cancel, its replicates spread over --processes worker processes, then
    each change is tested: our time head/base, and the ours/ORT ratio head/base (one-sided
    t-tests whose standard error holds the spread between those processes and the cell's
    calibrated between-run spread sigma_b, Welch-Satterthwaite degrees of freedom,
    Benjamini-Hochberg at --q across all cells, minimum effect --min-effect).

    \b
    ❌ numerics broke  head fails the numerics gate where base passed
    🔴 regression      confidently worse by more than the minimum effect
    ⚠️ possible        confidently worse, not confidently by more than it
    🟢 improvement     confidently better by more than it
    ✅ unchanged       everything else;   ➖ not comparable (with the reason)

    An op whose native interface (its args struct, entry point or the shared declarations)
    differs between the revisions is measured with each side's own checkout in alternating
    worker processes instead; the output says so. Both sides are stored as runs (never history:
    `latest` ignores them) and the comparison with its verdicts is stored.

    Exit status: 0 no ❌/🔴; 1 any ❌, or 🔴 on our time or on ours/ORT; 2 bad input.

    \b
    Examples:
      perfbench ab --base-rev origin/main --suite attention --quick
      perfbench ab --base-rev HEAD --filter "op=Softmax threads=1"        # your uncommitted change
      perfbench ab --base-rev v0.1 --head-rev main --format markdown -o comment.md
    """
    from perfbench import ab as ab_mod

    opts = ab_mod.ABOptions(suite=suite, base_rev=base_rev, head_rev=head_rev, filters=list(filters), quick=quick,
                            threads=[int(t) for t in split_list(threads) or []] or None, dtypes=split_list(dtype),
                            cache=list(cache) or None, spin=list(spin) or None, devices=list(device) or None,
                            replicates=replicates, processes=processes, db=db, calibration_file=calibration,
                            min_effect=_effect(min_effect), q=q)
    doc = ab_mod.ab(opts, TerminalUI())
    click.echo(f"comparison {doc['comparison_id']} stored (base run {doc['base']['run_id']}, head run "
               f"{doc['head']['run_id']})", err=True)
    return _show(doc, fmt, output)


@cli.command()
@click.argument("base")
@click.argument("head")
@click.option("--suite", help="Suite for `latest`-style references (default: any).")
@click.option("--host-class", "host_class", metavar="KEY", help="Host class for `latest`-style references.")
@_cmp_options
def compare(base, head, suite, host_class, min_effect, q, calibration, db, fmt, output):
    """Compare two stored runs, cell by cell: BASE and HEAD are run references.

    Run references: ID, latest, latest@BRANCH, sha:PREFIX (`perfbench runs` lists them).
    Cells are matched by cell key; cells whose comparability keys differ (host class, ORT
    version, protocol, timing definition) are listed as not comparable, never compared. The
    two runs are independent measurements, so each change's standard error counts both runs'
    within-run spread and twice the calibrated between-run spread; verdicts as `perfbench ab`
    (see `perfbench ab --help`). A change that makes us lose ground to ORT is flagged even when
    our absolute time moved with the machine: both verdicts are shown.

    Exit status: 0 no ❌/🔴; 1 any ❌, or 🔴 on our time or on ours/ORT; 2 bad input.

    \b
    Examples:
      perfbench compare 12 15
      perfbench compare latest@main latest --suite attention --format markdown
    """
    from perfbench import ab as ab_mod
    from perfbench.cli.commands import host_class_id
    from perfbench.store import repo
    from perfbench.store.db import Store

    opts = ab_mod.ABOptions(suite=suite or "", db=db, calibration_file=calibration, min_effect=_effect(min_effect),
                            q=q)
    store = Store(db)
    with store.session() as s:
        b = repo.resolve_ref(s, base, suite=suite, host_class_id=host_class_id(s, base, host_class))
        h = repo.resolve_ref(s, head, suite=suite, host_class_id=host_class_id(s, head, host_class))
        if b == h:
            raise UsageError(f"{base!r} and {head!r} are the same run ({b}): nothing to compare")
        doc = ab_mod.compare_runs(s, b, h, base, head, opts)
    return _show(doc, fmt, output)


@cli.command()
@suite_options
@click.option("--rounds", type=int, default=3, show_default=True,
              callback=bounded("calibrate_rounds", suites.CALIBRATE_ROUNDS),
              help=f"A/A passes over the cells (between-run spread needs >= 2; more is steadier), at most "
                   f"{suites.CALIBRATE_ROUNDS.hi}.")
@click.option("--replicates", type=int, metavar="N", callback=bounded("replicates"), help=REPLICATES_HELP)
@click.option("--processes", type=int, metavar="P", callback=bounded("processes"), help=AB_PROCESSES_HELP)
@click.option("--db", metavar="URL", help=DB_HELP)
def calibrate(suite, filters, quick, threads, dtype, cache, spin, device, rounds, replicates, processes, db):
    """Measure this host's noise: the same build against itself (A/A), for sigma_b.

    The working tree's native library is loaded twice and measured like `perfbench ab` (base,
    head and ORT interleaved) in --rounds passes over the cells. Per cell key it stores, for
    this host class (CPU model, cores, OS: fresh CI runners of one class share it), the
    between-run spread sigma_b of the head/base change, of our time, of ORT's and of the
    ours/ORT ratio, with how and when it was measured. `ab` and `compare` use it; without one
    they use a stated default and say so. Costs about --rounds x 1.5 x the run time of the cells.

    \b
    Examples:
      perfbench calibrate --suite attention --quick
      perfbench calibrate --suite attention --filter "op=Softmax" --rounds 5
      perfbench calibration export -o calibration.json      # for CI jobs on the same host class
    """
    from perfbench import ab as ab_mod

    opts = ab_mod.ABOptions(suite=suite, filters=list(filters), quick=quick,
                            threads=[int(t) for t in split_list(threads) or []] or None, dtypes=split_list(dtype),
                            cache=list(cache) or None, spin=list(spin) or None, devices=list(device) or None,
                            replicates=replicates, processes=processes, db=db, rounds=rounds)
    cal = ab_mod.calibrate(opts, TerminalUI())
    click.echo(_calibration_table(cal))
    return 0


def _calibration_table(cal: dict) -> str:
    from perfbench.compare.escape import term

    meta = cal["calibration"]
    pooled = meta["pooled"]
    procs = meta.get("processes")
    lines = [f"calibration {meta['id']}: {len(cal['cells'])} cells, {meta['rounds']} rounds"
             + (f", replicates over {procs} worker processes (judges runs with as many)" if procs else "")
             + f", {meta['created_at']} on {term(cal['host_class'])}",
             "pooled sigma_b (median over cells): " + ", ".join(
                 f"{k} {100 * v:.2f}%" for k, v in pooled.items() if v is not None), "",
             f"{'case':60} {'dtype':5} {'thr':>3} {'cache':5} {'ab':>7} {'ours':>7} {'ORT':>7} {'ratio':>7}"]
    for c in cal["cells"]:
        lines.append(f"{term(c['case_id'][:60]):60} {term(c['dtype']):5} {c['threads']:>3} {term(c['cache']):5} "
                     + " ".join(f"{100 * c[k]:6.2f}%" for k in ("sigma_ab", "sigma_ours", "sigma_ort", "sigma_ratio")))
    return "\n".join(lines)


@cli.group()
def calibration():
    """Stored noise calibrations: show the newest, export it for another database or CI job."""


@calibration.command("show")
@click.option("--host-class", "host_class", metavar="KEY", help="Host class (default: this host's).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--db", metavar="URL", help=DB_HELP)
def calibration_show(host_class, fmt, db):
    """The newest calibration of a host class (default: this host's)."""
    cal = _newest(host_class, db)
    click.echo(json.dumps(cal, indent=1) if fmt == "json" else _calibration_table(cal))


@calibration.command("export")
@click.option("-o", "--output", required=True, metavar="FILE", help="The JSON file to write.")
@click.option("--host-class", "host_class", metavar="KEY", help="Host class (default: this host's).")
@click.option("--db", metavar="URL", help=DB_HELP)
def calibration_export(output, host_class, db):
    """Write the newest calibration to FILE (`perfbench ab --calibration FILE` reads it)."""
    cal = _newest(host_class, db)
    emit(json.dumps(cal, indent=1) + "\n", output)


def _newest(host_class, db) -> dict:
    from perfbench import ab as ab_mod
    from perfbench.store import hostinfo
    from perfbench.store.db import Store

    key = host_class or hostinfo.host_facts().class_key
    with Store(db).session() as s:
        return ab_mod.export_calibration(s, host_class_key=key)


@cli.command()
@click.argument("file", type=click.File("rb"))
@click.option("--format", "fmt", type=click.Choice(CMP_FORMATS), default="markdown", show_default=True)
@click.option("-o", "--output", metavar="FILE", help="Write to FILE instead of stdout.")
def render(file, fmt, output):
    """Re-render a comparison document (JSON from `ab`/`compare --format json`) with this perfbench.

    The document is validated strictly (schema version, every field's type); every string from
    it is escaped in the markdown. CI uses this to render a pull request's results with the
    default branch's code. Exit status: the document's verdict (0, or 1 on ❌/🔴); 2 invalid.
    """
    from perfbench.compare import render_change

    data = file.read(MAX_DOCUMENT_BYTES + 1)
    if len(data) > MAX_DOCUMENT_BYTES:
        raise UsageError(f"the comparison document is larger than {MAX_DOCUMENT_BYTES // 2**20} MiB: not rendered")
    doc = render_change.load(data)
    return _show(doc, fmt, output)
