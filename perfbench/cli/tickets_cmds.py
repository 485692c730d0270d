"""`perfbench tickets ...` (losing ranges as the work queue) and `perfbench score`."""

from __future__ import annotations

import json

import click

from perfbench.cli import DB_HELP, cli
from perfbench.cli.commands import emit
from perfbench.errors import UsageError

TICKET_FORMATS = ["table", "markdown", "json"]


def _load(s, include_closed: bool, host_class: str | None):
    from sqlalchemy import select

    from perfbench.store import models as m
    from perfbench.tickets import lifecycle

    q = select(m.Ticket)
    if not include_closed:
        q = q.where(m.Ticket.state == "open")
    if host_class:
        q = q.join(m.HostClass).where(m.HostClass.key == host_class)
    return sorted(s.scalars(q).all(), key=lambda t: (t.state != "open",) + lifecycle.sort_key(t))


def _listing(tickets, fmt: str) -> str:
    from perfbench.compare.escape import clean, md_text
    from perfbench.compare.render import fmt_ns, grid
    from perfbench.tickets import render

    if fmt == "json":
        return json.dumps({"perfbench_tickets": 1, "tickets": [render.as_dict(t, t.host_class.key) for t in tickets]},
                          indent=1) + "\n"

    def prio(t):
        return f"{fmt_ns(t.priority)}/call" if t.kind == "loss" else f"{len(t.cells)} cells"

    if fmt == "markdown":
        lines = ["| # | Kind | State | Priority | Title | Host class |", "|---:|---|---|---:|---|---|"]
        for t in tickets:
            lines.append(f"| {t.id} | {md_text(t.kind)} | {md_text(render.state_text(t), 80)} | {prio(t)} | "
                         f"{md_text(t.title, 250)} | {md_text(t.host_class.key, 120)} |")
        return "\n".join(lines) + "\n"
    several = len({t.host_class_id for t in tickets}) > 1
    rows = [[str(t.id), t.kind, t.state if t.state == "open" else f"closed ({t.closed_reason})", prio(t),
             clean(t.title, 160)] + ([clean(t.host_class.key, 60)] if several else []) for t in tickets]
    return grid(["#", "kind", "state", "priority", "title"] + (["host class"] if several else []), rows) + "\n"


@cli.group(invoke_without_command=True)
@click.option("--all", "show_all", is_flag=True, help="Closed tickets too (after the open ones).")
@click.option("--watch", is_flag=True,
              help="Instead: the newest run's cells slower than ORT that are not (yet) ticket-worthy.")
@click.option("--host-class", "host_class", metavar="KEY", help="Only this host class's tickets.")
@click.option("--format", "fmt", type=click.Choice(TICKET_FORMATS), default="table", show_default=True)
@click.option("-o", "--output", metavar="FILE", help="Write to FILE instead of stdout.")
@click.option("--db", metavar="URL", help=DB_HELP)
@click.pass_context
def tickets(ctx, show_all, watch, host_class, fmt, output, db):
    """The work queue: ranges of cells where we lose to ORT (or give a wrong answer), one ticket
    per range, open ones by priority.

    A ticket opens when a complete run finds cells confidently slower than ORT by more than 3%
    (after Benjamini-Hochberg over the run's cells, with the calibrated between-run noise); every
    `perfbench run` updates them. It closes when a complete run on the same host class measures
    every cell of its range and none is a loss, and reopens if they lose again (docs/tickets.md).

    Priority: wrong answers, then failures to run, then losses by the time we lose per call summed
    over the range (ours - ORT), then the worst ratio.

    \b
    Examples:
      perfbench tickets                         open tickets, highest priority first
      perfbench tickets show 3                  one ticket in full (cells, reproduce command, history)
      perfbench tickets --watch                 losses below the ticket bar in the newest run
      perfbench tickets export tickets/         one markdown file per ticket
      perfbench tickets update 12               take run 12 in by hand (e.g. an imported run)
      perfbench tickets sync --repo O/N --dry-run
    """
    if ctx.invoked_subcommand is not None:
        return None
    from perfbench.store.db import Store

    store = Store(db)
    with store.session() as s:
        if watch:
            if fmt == "markdown":
                raise UsageError("--watch prints a table or --format json")
            emit(_watch_listing(s, host_class, fmt), output)
            return 0
        ts = _load(s, show_all, host_class)
        if not ts and fmt == "table":
            click.echo("no open tickets" + (" (or none at all)" if show_all else " (--all shows closed ones)")
                       + f" in {store.shown}", err=True)
            return 0
        emit(_listing(ts, fmt), output)
    return 0


@tickets.command("show")
@click.argument("ticket_id", type=click.IntRange(1, 2**63 - 1))  # a database id: signed 64-bit
@click.option("--format", "fmt", type=click.Choice(["markdown", "json"]), default="markdown", show_default=True)
@click.option("--db", metavar="URL", help=DB_HELP)
def tickets_show(ticket_id, fmt, db):
    """One ticket in full: title, state, the table of cells (ours, ORT, ratio with CI, throughput,
    share of this host's peak, ORT's path), first/last seen, the command that reproduces the range,
    and its history."""
    from perfbench.store import models as m
    from perfbench.store.db import Store
    from perfbench.tickets import render

    store = Store(db)
    with store.session() as s:
        t = s.get(m.Ticket, ticket_id)
        if t is None:
            raise UsageError(f"no ticket {ticket_id} in {store.shown} (`perfbench tickets --all` lists them)")
        if fmt == "json":
            click.echo(json.dumps(render.as_dict(t, t.host_class.key), indent=1))
        else:
            click.echo(f"# {t.id}. {render.md_text(t.title, 250)}\n")
            click.echo(render.body(t, t.host_class.key, render.events_of(t)), nl=False)
    return 0


@tickets.command("export")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--all", "show_all", is_flag=True, help="Closed tickets too.")
@click.option("--db", metavar="URL", help=DB_HELP)
def tickets_export(directory, show_all, db):
    """Write one markdown file per ticket into DIRECTORY (ticket-<id>.md: the name never changes
    with the ticket) and an index.md listing them by priority.

    Each file is written to a temporary file in DIRECTORY and renamed onto its name (a symlink
    there is replaced, never written through), and starts with the line
    `<!-- written by perfbench tickets export -->` (invisible in rendered markdown). Nothing is
    written over that lacks that line: if index.md or a ticket-N.md this export writes is there
    without it (your own file, or one from an export before signatures), the export refuses up
    front (exit 2), naming them, and writes nothing. A ticket-N.md in DIRECTORY that this export
    does not write (a ticket closed since) is removed only if it is a regular file carrying that
    line: your own ticket-99.md stays. Ticket files without it are left in place and named in one
    line on stderr: delete them yourself if they are stale. No marker file is read or written.
    DIRECTORY itself may be a symlink to a folder (you named it); a symlink to nothing is refused
    (exit 2)."""
    import os
    import re
    from pathlib import Path

    from perfbench import outdir
    from perfbench.store.db import Store
    from perfbench.tickets import render

    signature = "<!-- written by perfbench tickets export -->"  # the proof that an export wrote a file
    ticket_file = re.compile(r"ticket-[0-9]+\.md")
    folder = outdir.ensure_folder(Path(directory))
    store = Store(db)
    with store.session() as s:
        ts = _load(s, show_all, None)
        found = outdir.not_ours(folder, [f"ticket-{t.id}.md" for t in ts] + ["index.md"], signature)
        if found:
            raise UsageError(f"{directory}: {outdir.listing(found)} not written by perfbench tickets export (no "
                             f"line {signature}: written by an older perfbench or by someone else): move them away "
                             "or export to another folder; nothing was written")
        written = set()
        for t in ts:
            name = f"ticket-{t.id}.md"
            written.add(name)
            outdir.write_text(folder / name, f"{signature}\n# {t.id}. {render.md_text(t.title, 250)}\n\n"
                              + render.body(t, t.host_class.key, render.events_of(t)))
        outdir.write_text(folder / "index.md", f"{signature}\n# perfbench tickets\n\n" + _listing(ts, "markdown"))
    # a ticket closed since an earlier export: its file goes if that export wrote it (signed)
    stale = sorted((n for n in os.listdir(folder) if ticket_file.fullmatch(n) and n not in written),
                   key=lambda n: int(n[len("ticket-"):-len(".md")]))
    left = outdir.prune(folder, stale, written, ticket_file, signature=signature).left
    if left:
        click.echo(f"note: left {', '.join(rel for rel, _ in left)} in {directory}: not written by this export and "
                   f"without the line {signature} (written by an export before signatures, or by someone else); "
                   "delete them yourself if they are stale", err=True)
    click.echo(f"wrote {len(ts)} ticket file(s) and index.md to {directory}", err=True)
    return 0


def summary_line(summary: dict) -> str:
    if summary.get("already"):
        return f"tickets: run {summary['run']} was already taken in"
    parts = [f"{len(summary[k])} {k}" for k in ("opened", "reopened", "split", "updated", "merged", "closed")
             if summary.get(k)]
    ids = {k: summary[k] for k in ("opened", "reopened", "split", "closed") if summary.get(k)}
    detail = "; ".join(f"{k} #" + ", #".join(map(str, v)) for k, v in ids.items())
    loose = [w for w in summary.get("watch", []) if not w.get("ticket")]
    watch = (f"; {len(loose)} more cell(s) slower than ORT but not ticket-worthy (`perfbench tickets --watch`)"
             if loose else "")
    return (f"tickets: {', '.join(parts) if parts else 'no change'}"
            f" ({len(summary.get('unchanged', []))} unchanged)" + (f"; {detail}" if detail else "") + watch)


def _watch_listing(s, host_class: str | None, fmt: str) -> str:
    """The newest taken-in run's losses below the ticket bar, per host class."""
    from sqlalchemy import select

    from perfbench.compare.escape import clean
    from perfbench.compare.render import grid
    from perfbench.store import models as m

    q = select(m.TicketRun).order_by(m.TicketRun.applied_at.desc())
    if host_class:
        q = q.join(m.HostClass, m.HostClass.id == m.TicketRun.host_class_id).where(m.HostClass.key == host_class)
    newest: dict = {}
    for tr in s.scalars(q):
        newest.setdefault(tr.host_class_id, tr)
    if fmt == "json":
        return json.dumps({"perfbench_watch": 1, "runs": [{"run": tr.run_id, "host_class": s.get(m.HostClass, hc).key,
                                                           "min_effect": tr.summary.get("min_effect"),
                                                           "watch": tr.summary.get("watch", [])}
                                                          for hc, tr in newest.items()]}, indent=1) + "\n"
    out = []
    for hc, tr in newest.items():
        rows = tr.summary.get("watch", [])
        m_pct = 100 * (tr.summary.get("min_effect") or 0.03)
        out.append(f"{clean(s.get(m.HostClass, hc).key, 120)}, run {tr.run_id}: {len(rows)} cell(s) slower than ORT "
                   f"(whole 95% CI above 1) but not confidently by more than {m_pct:g}% after Benjamini-Hochberg "
                   "over the run with sigma_b (not ticket-worthy yet)")
        if rows:
            out.append(grid(["case", "dtype", "thr", "cache", "ours/ORT [95% CI]", "p (before BH)", "sigma_b", "ticket"],
                             [[clean(w["case"], 90), w["dtype"], str(w["threads"]), w["cache"],
                               f"{w['ratio']:.3f} [{w['lo']:.3f}, {w['hi']:.3f}]",
                               "-" if w["p"] is None else f"{w['p']:.2g}",
                               "-" if w["sigma_b"] is None else f"{100 * w['sigma_b']:.1f}%",
                               f"#{w['ticket']}" if w.get("ticket") else "-"] for w in rows]))
    return "\n".join(out) + "\n" if out else "no run taken into tickets yet\n"


@tickets.command("update")
@click.argument("ref")
@click.option("--suite", help="Suite for `latest`-style references (default: any).")
@click.option("--calibration", metavar="FILE", help="Judge with this calibration file (default: the database's).")
@click.option("--min-effect", type=float, default=0.03, show_default=True, help="Minimum effect m (fraction).")
@click.option("--db", metavar="URL", help=DB_HELP)
def tickets_update(ref, suite, calibration, min_effect, db):
    """Take run REF into the tickets by hand (`perfbench run` does it itself after every complete
    run). Each run is taken in once, and never after a newer run of its host class."""
    from perfbench.ab import load_calibration_file
    from perfbench.cli.commands import host_class_id
    from perfbench.store import repo
    from perfbench.store.calibration import file_unfit, processes_of
    from perfbench.store.db import Store
    from perfbench.tickets import lifecycle

    if not 0 <= min_effect < 1:
        raise UsageError(f"--min-effect {min_effect} must be a fraction in [0, 1), e.g. 0.03")
    cal = load_calibration_file(calibration) if calibration else None
    store = Store(db)
    with store.session() as s:
        rid = repo.resolve_ref(s, ref, suite=suite, host_class_id=host_class_id(s, ref, None))
        run = repo.load_run(s, rid)
        why = file_unfit(cal, run.host_class.key, run.protocol_version, run.ort_version,
                         processes_of(run.settings))
        if why:
            click.echo(f"note: the calibration file {why}: not used (the stated default sigma_b judges)", err=True)
        summary = lifecycle.update(s, rid, min_effect=min_effect, cal_file=cal)
    click.echo(summary_line(summary))
    return 0


@tickets.command("sync")
@click.option("--repo", "repo_name", required=True, metavar="OWNER/NAME", help="The GitHub repository.")
@click.option("--label", default="perfbench", show_default=True, help="The label every ticket issue carries.")
@click.option("--max-new", type=int, default=10, show_default=True, help="Create at most this many issues per sync.")
@click.option("--host-class", "host_class", metavar="KEY", help="Only this host class's tickets.")
@click.option("--api-url", metavar="URL", help="GitHub API root [env GITHUB_API_URL; default https://api.github.com].")
@click.option("--dry-run", is_flag=True, help="Send nothing; print what would be sent (no token needed).")
@click.option("--author", envvar="PERFBENCH_BOT_AUTHOR", metavar="LOGIN",
              help="The login the token writes as: only issues it opened are edited, closed or reopened (anyone can "
                   "paste a ticket's marker into an issue) [env PERFBENCH_BOT_AUTHOR; default: asked of GitHub "
                   "(GET /user), which an Actions GITHUB_TOKEN cannot answer: then give github-actions[bot]].")
@click.option("--db", metavar="URL", help=DB_HELP)
def tickets_sync(repo_name, label, max_new, host_class, api_url, dry_run, author, db):
    """Create, update and close GitHub issues from the tickets (token: GITHUB_TOKEN, never printed).

    Idempotent: each issue carries a hidden marker with its ticket's id, a second sync changes
    nothing. Open tickets get an issue (at most --max-new new ones per sync, highest priority
    first); a closed ticket closes its issue; a reopened one reopens it. Exit 5 when GitHub fails."""
    from perfbench.github import GitHubClient
    from perfbench.store.db import Store
    from perfbench.tickets import sync as sync_mod

    if max_new < 0:
        raise UsageError(f"--max-new {max_new} must be >= 0")
    client = GitHubClient(repo_name, api_url=api_url, dry_run=dry_run, log=lambda line: click.echo(line, err=True))
    store = Store(db)
    with store.session() as s:
        res = sync_mod.sync(s, client, label=label, max_new=max_new, host_class=host_class, author=author)
    verbs = {"created": "create", "updated": "update", "closed": "close", "reopened": "reopen"}
    for what, verb in verbs.items():
        for tid, num in getattr(res, what):
            click.echo(f"{'would ' + verb if dry_run else what} ticket {tid}" + (f" (issue #{num})" if num else ""))
    for tid, num in res.unseen:
        click.echo(f"would check ticket {tid}'s issue #{num} and update, close or reopen it if it differs")
    click.echo(f"sync {client.repo}: {len(res.created)} created, {len(res.updated)} updated, {len(res.closed)} "
               f"closed, {len(res.reopened)} reopened, {len(res.unchanged)} unchanged"
               + (f", {len(res.waiting)} waiting for the next sync (--max-new {max_new})" if res.waiting else "")
               + (" (dry run: nothing sent)" if dry_run else ""), err=True)
    return 0


@cli.command()
@click.option("--suite", required=True, help="The suite whose history to score.")
@click.option("--host-class", "host_class", metavar="KEY", help="Host class (default: this host's).")
@click.option("--last", type=int, default=8, show_default=True, help="How many of the newest full runs.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--db", metavar="URL", help=DB_HELP)
def score(suite, host_class, last, fmt, db):
    """fast_1 per op / dtype / threads over the history of full runs: the share of cells where
    ours is correct and faster than ORT (point ratio < 1), failures counted as slow (CONTRACTS §2).

    History = complete, non-partial, non-invalidated `perfbench run` runs of the suite on the host
    class, oldest to newest."""
    from perfbench.cli.commands import host_class_id
    from perfbench.store.db import Store
    from perfbench.tickets import score as score_mod

    if last < 1:
        raise UsageError("--last must be >= 1")
    store = Store(db)
    with store.session() as s:
        hc = host_class_id(s, "latest", host_class)
        doc = score_mod.history(s, suite, hc, last)
    if fmt == "json":
        click.echo(json.dumps(doc, indent=1))
        return 0
    if not doc["runs"]:
        click.echo(f"no full runs of suite {suite!r} on this host class yet: perfbench run --suite {suite}", err=True)
        return 0
    click.echo(score_mod.table(doc))
    return 0
