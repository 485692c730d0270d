"""`perfbench dashboard` end to end: a real SQLite file with runs, tickets and a regression flag,
the site written by the CLI, every page loaded from file:// in headless chromium (no console
errors, every figure drawn), screenshots saved to test-artifacts/dashboard/, hostile strings
rendered as text."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import timedelta

import pytest

from perfbench import outdir
from perfbench.dashboard.site import SIGNATURE
from perfbench.store import models as m
from perfbench.store import repo
from perfbench.tickets import lifecycle
from tests.conftest import ROOT, perfbench_cmd
from tests.dashboard import browser
from tests.store.test_store import T0, add_run, env  # noqa: F401  (fixture)
from tests.tickets.test_lifecycle import Runs, add_cells

HOSTILE = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'
ARTIFACTS = ROOT / "test-artifacts" / "dashboard"


@pytest.fixture()
def site(store, env, tmp_path, cli_env):  # noqa: F811
    with store.session() as s:
        # three runs of a suite whose name and branch are hostile; the second slower on two cells
        for i, slow in enumerate(({}, {(32, 1024): 1.6, (32, 4096): 2.4}, {(32, 4096): 1.3})):
            rid = add_run(s, env, minutes=10 * (i + 1), suite=HOSTILE, branch=HOSTILE, sha=f"{i:040d}",
                          finished_at=T0 + timedelta(minutes=10 * (i + 1) + 5))
            add_cells(s, rid, slow, mismatch={(14, 128)} if i == 2 else ())
            lifecycle.update(s, rid)
        bad = add_run(s, env, minutes=50, invalidated=True, invalidated_why="test")
        add_cells(s, bad, {(14, 512): 9.0})
        # work and peaks for the roofline; an n/a cell (ours below resolution), a substituted ORT dtype,
        # an ort-discrepancy and a hostile case name in the latest run
        for c in s.query(m.Cell).all():
            n = c.case.params["keys"] * c.case.params["heads"]
            c.flops, c.bytes_moved = 5.0 * n, 8.0 * n
        latest = s.query(m.Run).filter(m.Run.id == 3).one()
        cells = {(c.case.params["heads"], c.case.params["keys"]): c for c in latest.cells}
        cells[(14, 512)].verdict, cells[(14, 512)].ratio = "n/a", None
        cells[(14, 512)].side("ours").status = "below-resolution"
        cells[(14, 1024)].side("ort").path, cells[(14, 1024)].side("ort").dtype = "substituted", "f32"
        cells[(14, 4096)].side("ort").status = "ort-discrepancy"
        hostile = repo.ensure_case(s, "Softmax.<script>x</script>", "Softmax",
                                   {"batch": 1, "heads": 99, "queries": 1, "keys": 128}, "t0")
        cells[(32, 128)].case_pk = hostile.id
        host = s.query(m.Host).first()
        for kind, level, value, unit in (("fma_f32", None, 90.0, "GFLOP/s"), ("read", "L2", 80.0, "GB/s"),
                                         ("read", "DRAM", 13.0, "GB/s")):
            s.add(m.Peak(host_id=host.id, build_id=1, batch="b1", kind=kind, threads=1, level=level, value=value,
                         unit=unit, measured_at=T0, working_set_bytes=None if level is None else
                         {"L2": 2**20, "DRAM": 2**30}[level]))
        # ORT's dispatch 600 ns of its ~1040 ns: every cell is marked; one ORT share over 100%
        s.add(m.Peak(host_id=host.id, build_id=1, batch="b1", kind="ort_node_dispatch", threads=1, value=600.0,
                     samples=[580.0, 600.0, 620.0], unit="ns", measured_at=T0))
        o = cells[(32, 512)].side("ort")
        o.throughput, o.throughput_unit, o.peak_share = 18.2, "GB/s", 1.4
        # an `ab` comparison (its head is an ab-head run of run 2's commit) flagging one cell
        head = add_run(s, env, minutes=21, origin="ab-head", sha=f"{1:040d}")
        cmp_ = m.Comparison(kind="ab", base_run_id=1, head_run_id=head, host_class_id=env.hc_id, base_ref="a",
                            head_ref="b", summary={}, exit_code=1, document={}, created_at=T0)
        dirty = add_run(s, env, minutes=31, origin="ab-head", sha=f"{2:040d}", dirty=True)
        cmp2 = m.Comparison(kind="ab", base_run_id=3, head_run_id=dirty, host_class_id=env.hc_id, base_ref="HEAD",
                            head_ref="worktree", summary={}, exit_code=1, document={}, created_at=T0)
        cmp2.rows.append(m.ComparisonRow(case_id="Softmax.batch=1.heads=32.queries=1.keys=1024", op="Softmax",
                                         dtype="f32", threads=1, device="cpu", cache="warm", spin="off",
                                         verdict="regression"))
        s.add(cmp2)
        cmp_.rows.append(m.ComparisonRow(case_id="Softmax.batch=1.heads=32.queries=1.keys=4096", op="Softmax",
                                         dtype="f32", threads=1, device="cpu", cache="warm", spin="off",
                                         verdict="regression"))
        s.add(cmp_)
    out = tmp_path / "site"
    r = subprocess.run(perfbench_cmd() + ["dashboard", "-o", str(out), "--db", store.url], env=cli_env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stderr and "pages" in r.stderr
    return out


def test_every_page_loads_from_file_with_no_errors_and_draws_every_figure(site):
    pages = sorted(site.glob("*.html"))
    assert {p.name for p in pages} >= {"index.html", "overview.html", "op-softmax.html", "trends.html",
                                       "roofline.html", "tickets.html"}
    assert (site / "assets" / "plotly.min.js").stat().st_size > 1_000_000
    for page in pages:
        text = page.read_text()
        assert "cdn" not in text.lower() and "https://" not in text  # offline: nothing fetched
        want = len(re.findall(r'<div class="fig" id="fig\d+"></div>', text))
        got = browser.check(page)
        assert got["errors"] == "", (page.name, got["errors"])
        assert got["figures"] == want == got["drawn"] and got["empty"] == [], (page.name, got["empty"])
        if page.name not in ("index.html", "tickets.html"):  # tables only
            assert want > 0, page.name
    for name in ("overview", "op-softmax", "trends"):
        png = browser.screenshot(site / f"{name}.html", ARTIFACTS / f"{name}.png")
        assert png.stat().st_size > 20_000


def test_the_check_fails_on_a_broken_page(site, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(site, broken)
    (broken / "assets" / "plotly.min.js").unlink()  # the script the figures need is missing
    got = browser.check(broken / "overview.html")
    assert "plotly.js did not load" in got["errors"] and got["drawn"] == 0
    shutil.copy(site / "assets" / "plotly.min.js", broken / "assets" / "plotly.min.js")
    page = broken / "roofline.html"  # a figure with no traces: drawn, but empty
    page.write_text(re.sub(r'"data":\[.*?\],"layout"', '"data":[],"layout"', page.read_text(), count=1))
    got = browser.check(page)
    assert got["empty"] == ["fig0"] and got["drawn"] == got["figures"] - 1
    page = broken / "tickets.html"  # a script error on the page
    page.write_text(page.read_text().replace("<main>", "<main><script>undefinedFunction()</script>"))
    assert "undefinedFunction" in browser.check(page)["errors"]


def test_strings_from_the_database_render_as_text(site):
    overview = (site / "overview.html").read_text()
    assert HOSTILE not in overview and "&lt;img src=x" in overview
    for page in site.glob("*.html"):
        text = page.read_text()
        assert '<script>document.title="pwned"' not in text and "<script>x</script>" not in text
    soft = (site / "op-softmax.html").read_text()
    assert "Softmax.\\u0026lt;script\\u0026gt;x\\u0026lt;/script\\u0026gt;" in soft  # hover text: escaped twice
    for name in ("overview.html", "op-softmax.html", "trends.html"):
        got = browser.check(site / name)
        assert "<title>pwned</title>" not in got["dom"] and '<img src="x"' not in got["dom"]
        assert "<script>x</script>" not in got["dom"]


def test_what_the_pages_show(site):
    overview = (site / "overview.html").read_text()
    # the latest run (3) with its commit: 8 cells, 1 fail, 1 n/a (not due), 1 loss: fast_1 = 5/7
    assert "latest: run 3" in overview and "0000000000" in overview
    assert re.search(r"<td>f32</td><td>1</td><td>71%</td><td>kernel 67% substituted 100%</td>"
                     r"<td class=win>5</td><td class=loss>1</td>"
                     r"<td>0</td><td>1</td><td>1</td>", overview)
    tickets = (site / "tickets.html").read_text()
    assert "wrong-answer" in tickets and "op-softmax.html" in tickets
    soft = (site / "op-softmax.html").read_text()
    assert "FAIL" in soft and "keys" in soft  # a failing cell is marked, never a colour of a win
    assert '"n/a"' in soft and "1.25\u2020" not in soft  # below resolution is n/a, not FAIL
    assert "\u2020" in soft or "†" in soft  # substituted ORT dtype marked
    assert "\u2021" in soft or "‡" in soft  # ort-discrepancy marked
    # issue 17: dispatch-heavy cells (½) with their kernel-only ratio; a share over 100% (↑)
    assert re.search(r'"0\.80(\\u00bd|½)"', soft) and "kernel-only" in soft
    assert re.search(r'"0\.80(\\u00bd|½)(\\u2191|↑)"', soft)
    assert "↑ 1 measurement(s) of this op exceed 100% of their ceiling" in soft
    roof = (site / "roofline.html").read_text()
    assert "FMA f32 peak 90 GFLOP/s" in roof and "L2 read 80 GB/s" in roof and '"name":"ours f32"' in roof
    assert (site / "op-softmax-run2.html").exists() and "op-softmax-run2.html" in soft  # run selector
    trends = (site / "trends.html").read_text()
    flagged = re.findall(r'"name":"([^"]*) flagged","x":\["run 2[^"]*"\]', trends)
    assert flagged == ["heads=32 queries=1 keys=4096"]  # only the flagged case, only on its run
    # the invalidated run is left out everywhere
    assert not any("run 4 " in p.read_text() or "run4" in p.name for p in site.glob("*.html"))


def test_the_output_folder_is_ours_or_empty(site, tmp_path, cli_env, store):
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    r = subprocess.run(perfbench_cmd() + ["dashboard", "-o", str(other), "--db", store.url], env=cli_env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "has no .perfbench-dashboard file" in r.stderr
    assert (other / "notes.txt").read_text() == "keep me"
    # a page this command wrote (signed), for an op no longer in the database, goes; a file of yours stays
    shutil.copy(site / "op-softmax.html", site / "op-gone.html")
    marker = site / ".perfbench-dashboard"
    listed = json.loads(marker.read_text())
    marker.write_text(json.dumps({**listed, "written": listed["written"] + ["op-gone.html"]}))
    (site / "CNAME").write_text("example.org")
    r = subprocess.run(perfbench_cmd() + ["dashboard", "-o", str(site), "--db", store.url], env=cli_env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and not (site / "op-gone.html").exists() and (site / "overview.html").exists()
    assert (site / "CNAME").read_text() == "example.org"


# ---- issue 25: the output folder's marker and symlinks (a planted marker deletes nothing else) ----

def dashboard(cli_env, out, db):
    return subprocess.run(perfbench_cmd() + ["dashboard", "-o", str(out), "--db", db], env=cli_env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture()
def planted(tmp_path):
    """A folder someone else prepared for `-o`: a marker (filled in by each test), the user's .git,
    CNAME and notes, a symlink to a folder outside, and a victim file outside."""
    out = tmp_path / "site"
    (out / ".git").mkdir(parents=True)
    (out / ".git" / "config").write_text("[core]")
    (out / "CNAME").write_text("example.org")
    (out / "notes.txt").write_text("mine")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "a.txt").write_text("outside")
    (outside / "overview.html").write_text("outside page")
    (out / "link").symlink_to(outside)
    (out / "op-x.html").symlink_to(outside / "overview.html")
    victim = tmp_path / "victim"
    victim.write_text("victim")
    return out, outside, victim


@pytest.mark.parametrize("entries", [
    pytest.param(["{victim}"], id="absolute"),
    pytest.param(["."], id="dot"),
    pytest.param([""], id="empty"),
    pytest.param(["link/a.txt", "link/overview.html", "link"], id="through-a-symlink"),
    pytest.param(["op-x.html"], id="our-name-but-a-symlink"),
    pytest.param(["notes.txt", "CNAME", ".git", "../victim"], id="not-ours"),
    pytest.param([5, None, ["x"], {"a": 1}, "index.html"], id="non-string"),
])
def test_a_planted_marker_removes_nothing_but_our_own_files(planted, entries, cli_env, db_url):
    out, outside, victim = planted
    listed = [e.format(victim=victim) if isinstance(e, str) else e for e in entries]
    (out / ".perfbench-dashboard").write_text(json.dumps({"written": listed}))
    r = dashboard(cli_env, out, db_url)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert victim.read_text() == "victim" and (out / ".git" / "config").read_text() == "[core]"
    assert (out / "CNAME").read_text() == "example.org" and (out / "notes.txt").read_text() == "mine"
    assert (outside / "a.txt").read_text() == "outside" and (out / "link").is_symlink()
    assert (outside / "overview.html").read_text() == "outside page"
    assert (out / "index.html").is_file() and (out / "assets" / "plotly.min.js").is_file()
    assert "warning: not removing" in r.stderr


@pytest.fixture()
def one_run(store, env):  # noqa: F811
    """A database with one run (so the site has overview.html and the other host pages)."""
    Runs(store, env).take({(32, 1024): 1.6})
    return store.url


def snapshot(out):
    """The names in `out` and the contents of its regular files: nothing written is the same snapshot."""
    return {p.name: (p.read_bytes() if p.is_file() and not p.is_symlink() else None) for p in out.iterdir()}


@pytest.mark.parametrize("marker", ["", "not json", "[1, 2]", '{"written": "index.html"}', '{"written": {"a": 1}}',
                                    "{}"])
def test_an_empty_or_malformed_marker_is_refused(planted, marker, cli_env, one_run):
    """The review's finding: a folder with the user's own index.html and overview.html and an
    empty (or malformed) marker got one warning, and both pages were replaced. A marker that is
    not {"written": [...]} is no sign that the folder is ours: refused (exit 2), nothing written."""
    out, _, _ = planted
    (out / "index.html").write_text("<html>my index</html>")
    (out / "overview.html").write_text("<html>my overview</html>")
    (out / ".perfbench-dashboard").write_text(marker)
    before = snapshot(out)
    r = dashboard(cli_env, out, one_run)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert snapshot(out) == before and not (out / "assets").exists()
    assert str(out / ".perfbench-dashboard") in r.stderr and "choose a new or empty folder" in r.stderr


@pytest.mark.parametrize("listed", [[], ["overview.html"]], ids=["not-listed", "listed"])
def test_a_users_page_at_a_name_this_run_writes_is_refused(planted, listed, cli_env, one_run):
    """The review's finding: a valid marker, and the user's own overview.html (no signature) was
    replaced by a generated page. Every page this run writes is checked first: one that is there
    without our signature is refused up front (exit 2), before anything is removed or written."""
    out, _, _ = planted
    (out / "overview.html").write_text("<html>my overview</html>")
    (out / ".perfbench-dashboard").write_text(json.dumps({"written": listed}))
    before = snapshot(out)
    r = dashboard(cli_env, out, one_run)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert snapshot(out) == before and not (out / "assets").exists()
    assert "overview.html" in r.stderr and "written by an older perfbench or by someone else" in r.stderr
    assert "move them away" in r.stderr
    (out / "overview.html").unlink()  # moved away: the site is written, the user's other files kept
    r = dashboard(cli_env, out, one_run)
    assert r.returncode == 0, r.stderr
    assert SIGNATURE in (out / "overview.html").read_text() and (out / "notes.txt").read_text() == "mine"
    r = dashboard(cli_env, out, one_run)  # our own signed pages: written over
    assert r.returncode == 0, r.stderr


def test_a_users_plotly_in_their_own_assets_folder_is_refused(planted, cli_env, one_run):
    out, _, _ = planted
    (out / "assets").mkdir()
    (out / "assets" / "plotly.min.js").write_text("my own plotly build")
    (out / ".perfbench-dashboard").write_text(json.dumps({"written": ["assets"]}))
    r = dashboard(cli_env, out, one_run)
    assert r.returncode == 2 and "assets/plotly.min.js" in r.stderr, r.stderr
    assert (out / "assets" / "plotly.min.js").read_text() == "my own plotly build"
    assert not (out / "index.html").exists() and not (out / "overview.html").exists()


def test_pages_replace_symlinks_and_never_write_through_them(site, tmp_path, cli_env, store):
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("index.html", "overview.html", "tickets.html", ".perfbench-dashboard"):
        (outside / name).write_text(f"the user's {name}")
        (site / name).unlink()
        (site / name).symlink_to(outside / name)
    (outside / ".perfbench-dashboard").write_text('{"written": ["assets"]}')  # the marker is read through it
    shutil.rmtree(site / "assets")
    (site / "assets").symlink_to(outside)  # a folder we write into, pointing elsewhere
    r = dashboard(cli_env, site, store.url)
    assert r.returncode == 0, r.stderr
    for name in ("index.html", "overview.html", "tickets.html"):
        assert (outside / name).read_text() == f"the user's {name}"
        assert not (site / name).is_symlink() and "<!doctype html>" in (site / name).read_text()
    assert (outside / ".perfbench-dashboard").read_text() == '{"written": ["assets"]}'
    assert not (site / ".perfbench-dashboard").is_symlink()
    assert not (outside / "plotly.min.js").exists()
    assert not (site / "assets").is_symlink() and (site / "assets" / "plotly.min.js").stat().st_size > 1_000_000
    assert not list(site.glob(".*.tmp")) and not list((site / "assets").glob(".*.tmp"))


def test_a_planted_marker_never_removes_a_users_folder_or_page_named_like_ours(planted, cli_env, db_url):
    """The review's finding (a): a folder named like a host folder (release-20240101) and a page
    named like an op page (op-notes.html), both the user's, listed in a planted marker, were
    removed. A name is no proof: only our signature is."""
    out, _, _ = planted
    (out / "release-20240101").mkdir()
    (out / "release-20240101" / "photo.jpg").write_bytes(b"\xff\xd8 a photo")
    (out / "op-notes.html").write_text("<html>my notes on the perfbench dashboard</html>")
    (out / ".perfbench-dashboard").write_text(json.dumps({"written": ["release-20240101", "op-notes.html"]}))
    r = dashboard(cli_env, out, db_url)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert (out / "release-20240101" / "photo.jpg").read_bytes() == b"\xff\xd8 a photo"
    assert (out / "op-notes.html").read_text() == "<html>my notes on the perfbench dashboard</html>"
    assert "not removing 'release-20240101'" in r.stderr and "not removing 'op-notes.html'" in r.stderr
    assert json.loads((out / ".perfbench-dashboard").read_text())["written"] == ["assets", "index.html"]


def test_a_users_own_assets_folder_is_written_into_but_never_claimed(planted, cli_env, db_url):
    """A planted marker listing assets/ in a folder where the user keeps their own assets/: the
    dashboard writes plotly.min.js into it (the marker accepts the folder), but never signs it, so
    no later run removes the user's files with it."""
    out, _, _ = planted
    (out / "assets").mkdir()
    (out / "assets" / "logo.png").write_bytes(b"png")
    (out / ".perfbench-dashboard").write_text(json.dumps({"written": ["assets"]}))
    for _ in range(2):
        r = dashboard(cli_env, out, db_url)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        assert (out / "assets" / "logo.png").read_bytes() == b"png" and (out / "assets" / "plotly.min.js").is_file()
        assert not (out / "assets" / outdir.FOLDER_SIGN).exists() and "has files and no .perfbench-folder" in r.stderr


def test_our_own_stale_pages_and_folders_are_removed(tmp_path, cli_env, db_url):
    """What a previous run wrote carries our signature: a stale page and a stale host folder go;
    unsigned ones (a version before signatures) are named and left."""
    out = tmp_path / "site"
    r = dashboard(cli_env, out, db_url)
    assert r.returncode == 0, r.stderr
    assert SIGNATURE in (out / "index.html").read_text()[:outdir.SIGNED_BYTES]
    assert outdir.signed(out / "assets" / outdir.FOLDER_SIGN, SIGNATURE)
    # as a previous run would have left them: an op page, a host folder (several host classes)
    shutil.copy(out / "index.html", out / "op-gone.html")
    host = outdir.own_folder(out / "gone-host-0123abcd", SIGNATURE)
    shutil.copy(out / "index.html", host / "overview.html")
    (out / "op-old.html").write_text("<!doctype html><html><head><title>an older version's page</title>")
    (out / "old-host-89abcdef").mkdir()
    (out / "old-host-89abcdef" / "overview.html").write_text("an older version's page")
    marker = out / ".perfbench-dashboard"
    listed = json.loads(marker.read_text())["written"]
    marker.write_text(json.dumps({"written": listed + ["op-gone.html", "gone-host-0123abcd", "op-old.html",
                                                       "old-host-89abcdef"]}))
    r = dashboard(cli_env, out, db_url)
    assert r.returncode == 0, r.stderr
    assert not (out / "op-gone.html").exists() and not (out / "gone-host-0123abcd").exists()
    assert (out / "op-old.html").exists() and (out / "old-host-89abcdef" / "overview.html").exists()
    assert "not removing 'op-old.html'" in r.stderr and "not removing 'old-host-89abcdef'" in r.stderr
    assert "not removing 'index.html'" not in r.stderr and "not removing 'assets'" not in r.stderr
    assert (out / "index.html").is_file() and (out / "assets" / "plotly.min.js").is_file()


def test_several_host_classes_each_page_checked_in_its_host_folder(store, env, cli_env, tmp_path):  # noqa: F811
    """Host folders (several host classes): a previous run's signed folder and pages are written
    over; an unsigned page at a name this run writes inside a host folder is refused, nothing
    written."""
    from tests.store.test_store import facts

    with store.session() as s:
        other_hc = repo.ensure_host(s, facts(hostname="big", cores=64)).host_class_id
        add_cells(s, add_run(s, env, minutes=10), {(32, 1024): 1.6})
        add_cells(s, add_run(s, env, minutes=20, hc_id=other_hc), {})
    out = tmp_path / "site"
    for _ in range(2):  # the second run writes over the first one's signed folders and pages
        r = dashboard(cli_env, out, store.url)
        assert r.returncode == 0, r.stderr
    hosts = sorted(p for p in out.iterdir() if p.is_dir() and p.name != "assets")
    assert len(hosts) == 2 and all(SIGNATURE in (h / "overview.html").read_text() for h in hosts)
    assert outdir.signed(hosts[0] / outdir.FOLDER_SIGN, SIGNATURE)
    shutil.rmtree(hosts[0])  # as a user's own folder by that name: not signed, and not listed
    hosts[0].mkdir()
    (hosts[0] / "trends.html").write_text("my own trends")
    marker = out / ".perfbench-dashboard"
    marker.write_text(json.dumps({"written": [n for n in json.loads(marker.read_text())["written"]
                                              if n != hosts[0].name]}))
    before = snapshot(out)
    r = dashboard(cli_env, out, store.url)
    assert r.returncode == 2 and f"{hosts[0].name}/trends.html" in r.stderr, r.stderr
    assert snapshot(out) == before and (hosts[0] / "trends.html").read_text() == "my own trends"
    assert sorted(p.name for p in hosts[0].iterdir()) == ["trends.html"]
