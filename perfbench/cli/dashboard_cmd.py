"""`perfbench dashboard`: the static site of ours/ORT ratios."""

from __future__ import annotations

import time
from pathlib import Path

import click

from perfbench.cli import DB_HELP, cli


@cli.command()
@click.option("-o", "--output", "out", default="dashboards", show_default=True, metavar="DIR",
              help="Where the site goes (created; its pages are replaced).")
@click.option("--host-class", "host_class", metavar="KEY", help="Only this host class (default: every one in the database).")
@click.option("--suite", help="Only this suite's runs (default: all).")
@click.option("--runs", "max_runs", type=int, default=30, show_default=True,
              help="The newest N runs per suite and host class feed the trends and the run selectors.")
@click.option("--db", metavar="URL", help=DB_HELP)
def dashboard(out, host_class, suite, max_runs, db):
    """Write a static site of ours/ORT ratios: open DIR/index.html in a browser (no server, no network).

    \b
    Pages, per host class:
      overview   per op x dtype x threads: fast_1, win/loss/undecided/fail/n/a, geometric-mean
                 ratio, open tickets; the latest run per suite with its date and commit
      per op     heatmaps of ours/ORT over the sweep (one per dtype x threads; red = we lose,
                 blue = we win, grey = fail or n/a), a run selector
      trends     each case's ratio (with CI) and times across runs; regression flags marked
      roofline   achieved GFLOP/s vs arithmetic intensity under this host's measured peaks
      tickets    the open work queue
    Built from any database (e.g. one assembled with `perfbench import` from CI bundles);
    invalidated runs are left out.
    """
    from perfbench.dashboard import data, site
    from perfbench.errors import UsageError
    from perfbench.store.db import Store

    if max_runs < 1:
        raise UsageError("--runs must be >= 1")
    t0 = time.perf_counter()
    store = Store(db)
    with store.session() as s:
        hosts = data.load(s, host_class=host_class, suite=suite, max_runs=max_runs)
        if host_class and not hosts:
            raise UsageError(f"no host class {host_class!r} in {store.shown}")
    res = site.write_site(hosts, Path(out))
    n = sum(len(r["cells"]) for h in hosts for r in h["runs"])
    click.echo(f"wrote {res['pages']} pages with {res['figures']} figures from {n} cells to {out}/ in "
               f"{time.perf_counter() - t0:.1f} s; "
               f"open {res['index']}", err=True)
    return 0
