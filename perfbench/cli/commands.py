"""perfbench commands: run, list, show, runs, peaks, selfcheck, build."""

from __future__ import annotations

import json
import sys
import time

import click

from perfbench import filters as filt
from perfbench import suites
from perfbench.cli import DB_HELP, PROCESSES_HELP, cli, split_list
from perfbench.compare import render, views
from perfbench.errors import UsageError

FORMATS = ["table", "markdown", "json", "csv"]


def _fmt_s(s: float) -> str:
    s = max(0.0, s)
    if s < 90:
        return f"{s:.0f}s"
    if s < 5400:
        return f"{s // 60:.0f}m{s % 60:02.0f}s"
    return f"{s // 3600:.0f}h{(s % 3600) // 60:02.0f}m"


class TerminalUI:
    """Progress on stderr (a live line on a terminal, one line per cell otherwise)."""

    def __init__(self, quiet: bool = False):
        self.tty = sys.stderr.isatty()
        self.quiet = quiet
        self.line = ""
        self.t0 = time.monotonic()
        self.cur = ""

    def _clear(self):
        if self.tty and self.line:
            sys.stderr.write("\r" + " " * min(len(self.line), 200) + "\r")
            self.line = ""

    def info(self, msg):
        if not self.quiet:
            self._clear()
            click.echo(msg, err=True)

    def warn(self, msg):
        self._clear()
        click.secho("warning: " + msg, err=True, fg="yellow")

    def plan(self, n, est_s, notes):
        self.t0 = time.monotonic()
        for note in notes:
            self.info(note)
        self.info(f"measuring {n} cells, estimated {_fmt_s(est_s)} on this host")

    def start_cell(self, i, n, cell, eta_s):
        self.cur = f"[{i}/{n}] {100 * (i - 1) / n:3.0f}%  ETA {_fmt_s(eta_s)}  {cell.label()}"
        if self.tty:
            self._show(self.cur)
        elif not self.quiet:
            click.echo(self.cur, err=True)

    def phase(self, phase):
        if self.tty:
            self._show(f"{self.cur}  ({phase})")

    def _show(self, text):
        text = text[:200]
        sys.stderr.write("\r" + text + " " * max(0, len(self.line) - len(text)))
        sys.stderr.flush()
        self.line = text

    def end_cell(self, i, n, cell, result):
        outcome, derived = result
        if outcome.ours_status in ("mismatch", "error", "crashed", "timeout"):
            self._clear()
            click.secho(f"FAIL {cell.label()}: ours {outcome.ours_status}: {outcome.ours_message}", err=True,
                        fg="red")

    def done(self):
        self._clear()
        self.info(f"done in {_fmt_s(time.monotonic() - self.t0)}")


def emit(text: str, output: str | None):
    if output:
        with open(output, "w") as f:
            f.write(text)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=not text.endswith("\n"))


def _render(doc: dict, fmt: str, output: str | None):
    if fmt == "table":
        emit(render.table(doc, color=sys.stdout.isatty() and not output) + "\n", output)
    elif fmt == "markdown":
        emit(render.markdown(doc), output)
    elif fmt == "json":
        emit(render.to_json(doc), output)
    elif fmt == "csv":
        emit(render.to_csv(doc), output)
    elif fmt == "pyperf":
        if not output:
            raise UsageError("--format pyperf writes a file: give -o FILE.json")
        n = render.to_pyperf(doc, output)
        click.echo(f"wrote {output} ({n} benchmarks; try `python -m pyperf stats {output}`)", err=True)


def _exit_code(doc: dict) -> int:
    bad = [c for c in doc["cells"] if (c["ours"] or {}).get("status") in ("mismatch", "error", "crashed", "timeout")]
    return 1 if bad else 0


def suite_options(f):
    f = click.option("--filter", "filters", multiple=True, metavar="TERMS",
                     help="Only matching cells: 'op=Softmax dtype=f16 keys=128..1024' (terms AND; repeat = OR). "
                          "Names: op, dtype, threads, device, cache, spin, id, or any axis.")(f)
    f = click.option("--quick", is_flag=True, help="The suite's quick subset with fewer replicates (a partial run).")(f)
    f = click.option("--threads", multiple=True, metavar="N[,N]",
                     help="Override the suite's thread counts (capped at this host's cores).")(f)
    f = click.option("--dtype", "dtype", multiple=True, metavar="D[,D]",
                     help="Override the suite's dtypes: f32, f16, bf16.")(f)
    f = click.option("--cache", multiple=True, type=click.Choice(["warm", "cold"]),
                     help="Cache mode: warm (repeated calls) or cold (caches evicted before each call).")(f)
    f = click.option("--spin", multiple=True, type=click.Choice(["off", "on"]),
                     help="Thread-pool spin policy, the same for ours and ORT (default off).")(f)
    f = click.option("--device", "device", multiple=True, type=click.Choice(["cpu", "cuda"]),
                     help="Device (default: the suite's, cpu). CUDA kernels come in a later issue: cuda cells "
                          "report no-kernel until then.")(f)
    f = click.option("--suite", default="attention", show_default=True, metavar="NAME|FILE",
                     help="A suite in suites/ by name, or a path to a .toml file.")(f)
    return f


def bounded(key: str, limit: suites.Limit | None = None):
    """A click callback refusing an option's value outside its bound (suites.LIMITS[key], or
    `limit`), at the door: a UsageError (exit 2) naming the option, the value, the bound and a fix.
    `run`, `ab` and `calibrate` share it, and the bounds with the suite loader, the runner and
    `perfbench import`."""
    def check(ctx, param, value):
        if value is not None:
            suites.check_limit(key, value, param.opts[0], limit=limit)
        return value
    return check


def _runner_label(ctx, param, value):
    """--runner-label as `perfbench import` takes it (an identifier of at most 255 characters: no
    control or format character, no lone surrogate from undecodable bytes in the arguments)."""
    if value is not None:
        from perfbench.store import bundle_check
        from perfbench.store import models as m

        bundle_check.value(m.Run.__table__.c.runner_label, value, "--runner-label")
    return value


REPLICATES_HELP = (f"Replicates per cell, {suites.MIN_REPLICATES}..{suites.MAX_REPLICATES} "
                   f"(default: the suite's, {suites.DEFAULTS['replicates']}).")
PROCESSES_OPTION_HELP = f"{PROCESSES_HELP} At most {suites.MAX_PROCESSES}."


@cli.command()
@suite_options
@click.option("--max-time", type=float, metavar="SECONDS",
              help="Stop starting new cells after this long (the run is then partial; --resume finishes it).")
@click.option("--resume", type=int, metavar="RUN", help="Measure only the cells missing from run RUN.")
@click.option("--replicates", type=int, metavar="N", callback=bounded("replicates"), help=REPLICATES_HELP)
@click.option("--processes", type=int, metavar="P", callback=bounded("processes"), help=PROCESSES_OPTION_HELP)
@click.option("--runner-label", metavar="LABEL", callback=_runner_label,
              help="Recorded with the run (e.g. the CI runner's name).")
@click.option("--db", metavar="URL", help=DB_HELP)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="How to print the final table.")
@click.option("-o", "--output", metavar="FILE", help="Write the final table to FILE instead of stdout.")
def run(suite, filters, quick, threads, dtype, cache, spin, device, max_time, resume, replicates, processes,
        runner_label, db, fmt, output):
    """Measure a suite: ours vs ORT on every cell, numerics first, then timing.

    Prints how many cells it will measure and an estimate, then progress (cell i/N, ETA), then
    the table: per cell our time, ORT's, ours/ORT with its 95% CI and verdict, throughput as a
    share of this host's measured peak, and the numerics verdict. Every finished cell is stored
    at once; Ctrl-C marks the run interrupted and keeps them (`--resume RUN` continues).

    Exit status: 0 all our cells passed; 1 any of ours mismatched, errored, crashed or timed
    out (ORT-side failures are reported, not fatal); 2 bad input; 130/143 interrupted.

    \b
    Examples:
      perfbench run --suite attention --quick
      perfbench run --suite attention --filter "op=Softmax dtype=f16" --threads 1
      perfbench run --suite attention --cache cold --filter "op=RotaryEmbedding seq=1"
    """
    from perfbench import runner
    from perfbench.store import repo
    from perfbench.store.db import Store

    opts = runner.RunOptions(suite=suite, filters=list(filters), quick=quick,
                             threads=[int(t) for t in split_list(threads) or []] or None,
                             dtypes=split_list(dtype), cache=list(cache) or None, spin=list(spin) or None,
                             devices=list(device) or None, max_time=max_time, resume=resume, db=db,
                             replicates=replicates, processes=processes,
                             runner_label=runner_label)
    ui = TerminalUI()
    run_id = runner.run(opts, ui)
    store = Store(db)
    with store.session() as s:
        r = repo.load_run(s, run_id)
        doc = views.document(r)
    click.echo(f"run {run_id}: {doc['run']['status']}{' (partial)' if doc['run']['partial'] else ''}, "
               f"{len(doc['cells'])} cells stored in {store.shown}", err=True)
    _render(doc, fmt, output)
    _take_into_tickets(store, run_id)
    return _exit_code(doc)


def _take_into_tickets(store, run_id: int) -> None:
    """Every complete run updates the tickets (the work queue); a problem there is reported and
    never costs the run, which is already stored."""
    from perfbench.cli.tickets_cmds import summary_line
    from perfbench.errors import PerfbenchError
    from perfbench.tickets import lifecycle

    try:
        with store.session() as s:
            summary = lifecycle.update(s, run_id)
        click.echo(summary_line(summary) + " (`perfbench tickets` lists them)", err=True)
    except UsageError as e:  # the run is not one tickets take in now; the message says why
        click.echo(f"tickets: not updated: {e}", err=True)
    except PerfbenchError as e:
        click.echo(f"tickets: not updated: {e} (run {run_id} is stored; `perfbench tickets update {run_id}` "
                   "retries)", err=True)
    except Exception as e:  # noqa: BLE001 - a bug in tickets must not cost the run's exit status
        click.echo(f"tickets: not updated ({e.__class__.__name__}: {e}); run {run_id} is stored; "
                   f"`perfbench tickets update {run_id}` shows the full error", err=True)


@cli.command("list")
@suite_options
def list_cmd(suite, filters, quick, threads, dtype, cache, spin, device):
    """Print the cells a run would measure, without measuring."""
    from perfbench.store.hostinfo import usable_cores

    s = suites.load(suite)
    cells, notes = s.expand(quick=quick, dtypes_=split_list(dtype),
                            threads=[int(t) for t in split_list(threads) or []] or None,
                            cache=list(cache) or None, spin=list(spin) or None, devices=list(device) or None,
                            filters=[filt.parse(f) for f in filters], max_threads=usable_cores())
    for c in cells:
        click.echo(f"{c.case.case_id}  dtype={c.dtype} threads={c.threads} device={c.device} cache={c.cache} "
                   f"spin={c.spin}"
                   + ("  [numerics only]" if c.numerics_only else ""))
    for n in notes:
        click.echo(n, err=True)
    click.echo(f"{len(cells)} cells ({sum(c.numerics_only for c in cells)} numerics-only) in suite {s.name}", err=True)


@cli.command()
@click.argument("ref", default="latest")
@click.option("--suite", help="Suite for `latest`-style references (default: any).")
@click.option("--host-class", "host_class", metavar="KEY",
              help="Host class for `latest`-style references (default: this host's; `perfbench runs` shows them).")
@click.option("--format", "fmt", type=click.Choice(FORMATS + ["pyperf"]), default="table", show_default=True,
              help="pyperf writes a pyperf JSON file (-o) for `python -m pyperf stats/hist/compare_to`.")
@click.option("-o", "--output", metavar="FILE", help="Write to FILE instead of stdout.")
@click.option("--db", metavar="URL", help=DB_HELP)
def show(ref, suite, host_class, fmt, output, db):
    """Show a stored run. REF: ID, latest, latest@BRANCH or sha:PREFIX (CONTRACTS §5).

    `latest` is the newest complete, non-partial run on this host class; name a partial run
    (--quick, filtered) by its ID.
    """
    from perfbench.store import hostinfo, repo
    from perfbench.store.db import Store

    store = Store(db)
    with store.session() as s:
        hc_id = None
        if not ref.strip().isdigit():
            from sqlalchemy import select

            from perfbench.store import models as m

            key = host_class or hostinfo.host_facts().class_key
            hc = s.scalar(select(m.HostClass).where(m.HostClass.key == key))
            if hc is None and host_class:
                known = [k for (k,) in s.execute(select(m.HostClass.key))]
                raise UsageError(f"no host class {host_class!r} in this database; known: {known}")
            hc_id = hc.id if hc else -1
        rid = repo.resolve_ref(s, ref, suite=suite, host_class_id=hc_id)
        r = repo.load_run(s, rid)
        doc = views.document(r)
    _render(doc, fmt, output)
    return 0


@cli.group(invoke_without_command=True)
@click.option("--limit", default=20, show_default=True, help="How many of the newest runs.")
@click.option("--db", metavar="URL", help=DB_HELP)
@click.pass_context
def runs(ctx, limit, db):
    """List stored runs, newest first (invalidated runs are marked, with the reason).

    \b
    Subcommands:
      perfbench runs invalidate RUN --why "..."   keep a run but exclude it from comparisons
    """
    if ctx.invoked_subcommand is not None:
        return None
    from perfbench.compare.escape import term
    from perfbench.store import repo
    from perfbench.store.db import Store

    store = Store(db)
    with store.session() as s:
        rows = repo.list_runs(s, limit)
        if not rows:
            click.echo("no runs yet: perfbench run --suite attention --quick", err=True)
        for r in rows:  # every stored string through term(): an imported bundle may carry escapes
            click.echo(f"{r.id:5d}  {r.started_at:%Y-%m-%d %H:%M}  {term(r.suite):12s} {term(r.status):11s}"
                       f"{' partial' if r.partial else '        '}  {len(r.cells):4d} cells  "
                       f"{term((r.git_sha or '')[:10]):10s} {term(r.branch or '')}  {term(r.hostname)}  "
                       f"[{term(r.host_class.key)}]"
                       + (f"  INVALIDATED: {term(r.invalidated_why or '')}" if r.invalidated else ""))
    return 0


@runs.command("invalidate")
@click.argument("ref")
@click.option("--why", required=True, metavar="TEXT", help="Why the run must not be compared (recorded with it).")
@click.option("--suite", help="Suite for `latest`-style references (default: any).")
@click.option("--db", metavar="URL", help=DB_HELP)
def runs_invalidate(ref, why, suite, db):
    """Keep run REF but exclude it from comparisons and history: `latest` skips it and run time
    estimates ignore it. REF: ID, latest, latest@BRANCH or sha:PREFIX (as for `show`).
    Invalidating an invalidated run again replaces the reason."""
    from perfbench.store import models as m
    from perfbench.store import repo
    from perfbench.store.db import Store

    if not why.strip():
        raise UsageError("--why must say why the run is invalidated")
    store = Store(db)
    with store.session() as s:
        rid = repo.resolve_ref(s, ref, suite=suite, host_class_id=host_class_id(s, ref, None))
        r = s.get(m.Run, rid)
        again = r.invalidated
        r.invalidated, r.invalidated_at, r.invalidated_why = True, repo.now(), why.strip()
    click.echo(f"run {rid} {'was already invalidated; reason updated' if again else 'invalidated'}: {why.strip()}")
    return 0


def host_class_id(s, ref: str, host_class: str | None):
    """The host class `latest`-style references look in: --host-class, else this host's."""
    if ref.strip().isdigit():
        return None
    from sqlalchemy import select

    from perfbench.store import hostinfo
    from perfbench.store import models as m

    key = host_class or hostinfo.host_facts().class_key
    hc = s.scalar(select(m.HostClass).where(m.HostClass.key == key))
    if hc is None and host_class:
        known = [k for (k,) in s.execute(select(m.HostClass.key))]
        raise UsageError(f"no host class {host_class!r} in this database; known: {known}")
    return hc.id if hc else -1


@cli.command("export")
@click.argument("ref")
@click.option("-o", "--output", metavar="FILE", required=True, help="The bundle file to write (JSON).")
@click.option("--suite", help="Suite for `latest`-style references (default: any).")
@click.option("--host-class", "host_class", metavar="KEY", help="Host class for `latest`-style references.")
@click.option("--db", metavar="URL", help=DB_HELP)
def export(ref, output, suite, host_class, db):
    """Write run REF with its host, build, peaks and cases as a JSON bundle (e.g. a CI artifact)
    that `perfbench import` reads into another database. REF as for `show`."""
    from perfbench.store import bundle, repo
    from perfbench.store.db import Store

    store = Store(db)
    with store.session() as s:
        rid = repo.resolve_ref(s, ref, suite=suite, host_class_id=host_class_id(s, ref, host_class))
        data = bundle.export_run(s, rid)
    with open(output, "w") as f:
        json.dump(data, f, indent=1, allow_nan=False)
        f.write("\n")
    click.echo(f"wrote {output}: run {rid}, {len(data['cells'])} cells", err=True)
    return 0


@cli.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--db", metavar="URL", help=DB_HELP)
def import_cmd(file, db):
    """Read a bundle written by `perfbench export` into this database, as a new run (one
    transaction: all or nothing). Host, build and cases already here are reused; importing the
    same run twice is refused."""
    import os

    from perfbench.store import bundle
    from perfbench.store.db import Store

    def no_constant(name):
        raise ValueError(f"{name} is not JSON (bundles write non-finite numbers as \"inf\", \"-inf\", \"nan\")")

    # the bundle is input from outside: every way of failing to read it is one line, exit 2
    cap = bundle.MAX_BUNDLE_BYTES
    too_big = UsageError(f"{file}: larger than {cap // 1024**2} MiB, the most a bundle may be (the largest suite's "
                         "run exports a few MB): not a bundle `perfbench export` writes")
    try:
        with open(file, "rb") as f:
            if os.fstat(f.fileno()).st_size > cap:
                raise too_big
            text = f.read(cap + 1)  # a pipe or a growing file: never more than the cap
            if len(text) > cap:
                raise too_big
            data = json.loads(text.decode("utf-8"), parse_constant=no_constant)
    except OSError as e:
        raise UsageError(f"{file}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"{file}: not JSON: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{file}: not JSON: {e}") from None
    except RecursionError:
        raise UsageError(f"{file}: not a bundle: JSON nested too deeply to read") from None
    except (ValueError, OverflowError, MemoryError) as e:
        why = "a number with too many digits" if "integer string conversion" in str(e) else str(e)[:200]
        raise UsageError(f"{file}: not a bundle: {why}") from None
    try:
        rows = bundle.read(data)  # every value checked before the database is opened
    except UsageError as e:
        raise UsageError(f"{file}: {e}") from None
    except (ValueError, OverflowError, TypeError, RecursionError) as e:  # a check this perfbench lacks: still one line
        why = " ".join(str(e).split())[:200]
        raise UsageError(f"{file}: not a bundle this perfbench can import ({type(e).__name__}: {why})") from None
    store = Store(db)
    try:
        with store.session() as s:
            rid = bundle.import_bundle(s, data, rows)
            n = len(data["cells"])
    except UsageError as e:
        raise UsageError(f"{file}: {e}") from None
    click.echo(f"imported {file} as run {rid} ({n} cells) into {store.shown}")
    return 0


@cli.command()
@click.option("--db", metavar="URL", help=DB_HELP)
@click.option("--show", is_flag=True, help="Print this host's stored set (medians, samples' range and spread, ceilings) "
                                            "and measure nothing.")
def peaks(db, show):
    """Measure and store this host's ceilings: f32 FMA and bf16 dot peaks, read bandwidth on a
    ladder of working sets (16 KiB doubling to twice the L3, then DRAM), copy bandwidth (bytes
    read + written) on the same ladder from 128 KiB a thread, ORT's per-node dispatch. `run`
    does this once per host. A cell's side is divided by the read figure at its working set,
    or, for the share of its bytes it writes, by a mix of the read and copy figures.

    Each probe is measured 3 times, interleaved with the others; the median is stored with
    every sample, and a cell is divided by the best sample within 15% of the median. A set (its
    medians or those ceilings) that breaks physical order (more threads slower, a deeper cache level
    faster, a copy faster than twice the read of its working set, beyond 15%; a larger working
    set faster within one level, beyond 75%) is re-measured twice and then refused: nothing
    stored, exit 1.

    \b
    perfbench peaks            # measure (about 10 s on 2 cores)
    perfbench peaks --show     # what shares of peak are divided by
    """
    from perfbench import runner
    from perfbench.kernels_ffi import builder, load
    from perfbench.store import hostinfo, repo
    from perfbench.store.db import Store
    from perfbench.timing import peaks as peaks_mod

    store = Store(db)
    facts = hostinfo.host_facts()
    if show:
        from sqlalchemy import select

        from perfbench.store import models as m

        with store.session() as s:
            host = s.scalar(select(m.Host).join(m.HostClass).where(m.Host.hostname == facts.hostname,
                                                                   m.HostClass.key == facts.class_key))
            rows = repo.latest_peaks(s, host) if host else []
        if not rows:
            raise UsageError(f"no peaks stored for {facts.hostname} in {store.shown}: run `perfbench peaks` first")
        from perfbench.compare.escape import term

        click.echo(f"{facts.hostname}: measured {rows[0]['measured_at']:%Y-%m-%d %H:%M} ({term(rows[0]['isa'])})")
        for line in peaks_mod.describe(rows):
            click.echo(term(line))
        return
    ui = TerminalUI()
    info = builder.build(log=ui.info)
    lib = load(info)
    with store.session() as s:
        host = repo.ensure_host(s, facts)
        build = repo.ensure_build(s, info)
        hid, bid = host.id, build.id
    ui.info(f"host {facts.hostname}: {facts.class_key}; L2 {facts.l2_bytes}, L3 {facts.l3_bytes} bytes; "
            f"ISA path {lib.isa_active}")
    with runner.host_lock(ui):
        rows = runner.ensure_peaks(store, hid, bid, lib, facts, ui, force=True)
    click.echo(f"stored {len(rows)} peak figures for {facts.hostname}")


@cli.command()
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def selfcheck(fmt):
    """Check the harness: ORT's differential estimate vs plain per-call time on a large op
    (expect within 5%), the harness floors of both sides, and ORT's per-node dispatch."""
    from perfbench import runner
    from perfbench.kernels_ffi import load
    from perfbench.timing import selfcheck as sc

    ui = TerminalUI()
    lib = load(log=ui.info)
    with runner.host_lock(ui):
        res = sc.run_all(lib, log=ui.info)
    if fmt == "json":
        click.echo(json.dumps(res, indent=2))
        return 0
    d = res["differential"]
    ok = abs(d["rel_diff"]) <= 0.05
    f = res["floors"]
    click.echo(f"differential vs plain per-call ({d['op']}, K={d['K']}): {d['differential_ns'] / 1e3:.1f} µs vs "
               f"{d['plain_ns'] / 1e3:.1f} µs ({100 * d['rel_diff']:+.1f}%) "
               + ("OK (within 5%)" if ok else "WARN: beyond 5%, the host may be noisy"))
    click.echo(f"our harness floor (no-op kernel through the native loop): {f['ours_noop']['warm_ns']:.1f} ns warm, "
               f"{f['ours_noop']['cold_ns']:.0f} ns cold")
    click.echo(f"ORT harness floor: 1-node IOBinding run {f['ort_iobinding_1node_ns'] / 1e3:.2f} µs; "
               f"session.run without IOBinding {f['ort_session_run_1node_ns'] / 1e3:.2f} µs")
    click.echo(f"ORT per-node dispatch: {res['ort_node_dispatch_ns']:.0f} ns per extra node "
               "(included in ORT's marginal cost, not in ours)")
    return 0


@cli.command()
@click.option("--suite", default="attention", show_default=True, metavar="NAME|FILE",
              help="A suite in suites/ by name, or a path to a .toml file.")
@click.option("--filter", "filters", multiple=True, metavar="TERMS",
              help="Only matching cells, as for `run` (e.g. 'op=GroupQueryAttention dtype=bf16').")
@click.option("--all-shapes", is_flag=True, help="Every shape of the suite, not only its numerics-only and quick ones.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def mutants(suite, filters, all_shapes, fmt):
    """Show the numerics gate rejecting every mutant (negative controls).

    For each (case, dtype) of the suite -- its numerics-only odd shapes and its quick shapes --
    the gate judges our kernel (it must pass) and every mutant of the op that applies: the
    float64 oracle with one realistic bug switched on (off-by-one length, wrong KV-group
    mapping, rotary halves swapped, ...), stored in the cell's dtype. Exit status 1 if the gate
    accepts any mutant or rejects our kernel.

    \b
    Examples:
      perfbench mutants --filter "op=GroupQueryAttention"
      perfbench mutants --format json
    """
    from perfbench import ops as ops_pkg
    from perfbench.kernels_ffi import load
    from perfbench.timing import mutants as mt

    s = suites.load(suite)
    cells, _ = s.expand(quick=not all_shapes, filters=[filt.parse(f) for f in filters], threads=[1])
    seen, todo = set(), []
    for c in cells:
        key = (c.case.case_id, c.dtype)
        if key not in seen:
            seen.add(key)
            todo.append(c)
    ui = TerminalUI()
    lib = load(log=ui.info)
    results = []
    for i, c in enumerate(todo, 1):
        click.echo(f"[{i}/{len(todo)}] {c.case.case_id} {c.dtype}", err=True)
        results += mt.judge(lib, ops_pkg.get(c.case.op), c.case, c.dtype, s.settings["seed"])
    bad = [r for r in results if not r.ok]
    if fmt == "json":
        click.echo(json.dumps([{**r.__dict__, "ok": r.ok} for r in results], indent=2, default=str))
    else:
        w = max((len(r.subject) for r in results), default=10)
        for r in results:
            what = ("passes" if not r.rejected else "REJECTED") if r.subject == "ours" else \
                ("rejected" if r.rejected else "ACCEPTED")
            click.echo(f"{r.op:<20} {r.dtype:<5} {r.subject:<{w}}  err={r.err:.3g} tol={r.tol:.3g}  {what:<8}  "
                       f"{r.case_id.split('.', 1)[1]}")
        by = {}
        for r in results:
            if r.subject != "ours":
                k = (r.op, r.subject)
                by.setdefault(k, [0, 0])
                by[k][0] += r.rejected
                by[k][1] += 1
        click.echo("")
        for (op, name), (rej, n) in sorted(by.items()):
            click.echo(f"{op:<20} {name:<{w}}  rejected in {rej}/{n} cells")
        n_ours = sum(r.subject == "ours" for r in results)
        click.echo(f"our kernel passed {sum(r.ok for r in results if r.subject == 'ours')}/{n_ours} cells; "
                   f"{len(bad)} problem(s)")
    return 1 if bad else 0


@cli.command()
@click.option("--force", is_flag=True, help="Rebuild even if the sources did not change.")
def build(force):
    """Build the native library for the current sources (runs do this automatically)."""
    from perfbench.kernels_ffi import builder, load

    info = builder.build(force=force, log=lambda m: click.echo(m, err=True))
    lib = load(info)
    click.echo(f"{info.path}\n  build id {info.build_id}, sources {info.source_hash[:12]}, {info.compiler_version}\n"
               f"  ISA paths compiled: {', '.join(info.isa_compiled)}; this CPU runs: {', '.join(lib.isa_supported)}; "
               f"active: {lib.isa_active}")


@cli.command()
@click.argument("ref")
@click.option("--filter", "filters", multiple=True, required=True, metavar="TERMS",
              help="Terms selecting exactly one cell of the run (repeatable = OR), e.g. \"op=Softmax keys=4096 dtype=f32 threads=1\".")
@click.option("-o", "--output", "out", required=True, metavar="DIR", help="A new (or empty) folder to write.")
@click.option("--suite", help="Suite for `latest`-style references (default: any).")
@click.option("--host-class", "host_class", metavar="KEY", help="Host class for `latest`-style references.")
@click.option("--db", metavar="URL", help=DB_HELP)
def repro(ref, filters, out, suite, host_class, db):
    """Write one measured cell of run REF as a single-node ONNX model plus test data, to hand a
    failing or losing cell to someone: DIR/model.onnx, DIR/test_data_set_0/input_K.pb (the exact
    bytes measured) and output_K.pb (the float64 oracle in the cell's dtype), DIR/cell.json (the
    cell key, verdict, ratio, tolerances, the dtype ORT ran, outputs sharing an input's buffer).
    The filter must select exactly one cell. Replay it with our kernel and ORT's:
    `perfbench node DIR/model.onnx --data DIR/test_data_set_0` (or with any ONNX runtime).

    \b
    Example:
      perfbench repro latest --suite attention --filter "op=Softmax heads=32 queries=128 keys=512 dtype=f32 threads=1" -o softmax-cell/
    """
    from pathlib import Path

    from perfbench import filters as filt
    from perfbench import repro as repro_mod
    from perfbench.store import repo
    from perfbench.store.db import Store

    flts = [filt.parse(f) for f in filters]
    store = Store(db)
    with store.session() as s:
        rid = repo.resolve_ref(s, ref, suite=suite, host_class_id=host_class_id(s, ref, host_class))
        cell = repro_mod.find_cell(s, rid, flts)
        res = repro_mod.write(cell, Path(out))
    info = res["info"]
    ratio = f", ours/ORT {info['ratio']:.3f}" if info["ratio"] else ""
    click.echo(f"wrote {res['model']} and test_data_set_0/ ({res['inputs']} inputs, {res['outputs']} expected "
               f"outputs) for {info['case_id']} {info['dtype']} threads={info['threads']} of run {info['run']} "
               f"({info['verdict']}{ratio})")
    return 0
