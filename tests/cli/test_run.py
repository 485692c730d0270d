"""`perfbench run` end to end, as a user runs it: a real worker, real ORT sessions, a real
SQLite file. One database per module, so this host's peaks are measured once."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli_environ, perfbench_cmd

TINY = str(ROOT / "tests" / "fixtures" / "tiny.toml")
FAILING = str(ROOT / "tests" / "fixtures" / "failing.toml")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    e = cli_environ(d)
    e["_DB_PATH"] = str(d / "results.db")
    return e


def pb(env, *args, timeout=300):
    return subprocess.run(perfbench_cmd() + list(args), env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def db_rows(env, sql, *params):
    con = sqlite3.connect(env["_DB_PATH"])
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def test_quick_run_end_to_end(env):
    r = pb(env, "run", "--suite", TINY, "--quick")
    assert r.returncode == 0, r.stderr
    # before measuring: how many cells and an estimate; progress; then the table
    assert "measuring this host's peaks" in r.stderr  # first run on this database
    assert "measuring " in r.stderr and "cells, estimated" in r.stderr
    assert "[1/" in r.stderr and "ETA" in r.stderr
    for col in ("ours/ORT [95% CI]", "verdict", "numerics", "ORT path", "fast_1"):
        assert col in r.stdout
    assert "substituted→f32" in r.stdout  # bf16 cells are compared with ORT's f32
    run_id, status, partial = db_rows(env, "select id, status, partial from runs order by id desc limit 1")[0]
    assert status == "complete" and partial == 1  # --quick is partial
    cells = db_rows(env, "select verdict from cells where run_id = ?", run_id)
    assert len(cells) == 2 + 2  # (1 timed + 1 numerics-only case) x 2 dtypes; rotary has no quick subset
    assert all(v in ("win", "loss", "undecided", "n/a") for (v,) in cells)
    # a second run does not re-measure peaks
    r2 = pb(env, "run", "--suite", TINY, "--quick", "--filter", "dtype=f32")
    assert r2.returncode == 0 and "measuring this host's peaks" not in r2.stderr


def test_show_formats_and_pyperf_export(env, tmp_path):
    r = pb(env, "run", "--suite", TINY, "--filter", "op=RotaryEmbedding interleaved=1", "--dtype", "f32")
    assert r.returncode == 0, r.stderr
    run_id = db_rows(env, "select max(id) from runs")[0][0]
    doc = json.loads(pb(env, "show", str(run_id), "--format", "json").stdout)
    assert doc["schema_version"] == 1 and doc["run"]["id"] == run_id
    (cell,) = doc["cells"]
    assert cell["op"] == "RotaryEmbedding" and cell["params"]["interleaved"] == 1
    assert cell["ours"]["status"] == "ok" and cell["ort"]["path"] == "kernel"
    assert cell["ci_low"] <= cell["ratio"] <= cell["ci_high"] and cell["n"] == 3
    assert cell["numerics"]["err_ours"] <= cell["numerics"]["tol"]
    csv_out = pb(env, "show", str(run_id), "--format", "csv").stdout.splitlines()
    assert csv_out[0].startswith("run_id,case_id,op,dtype") and len(csv_out) == 2
    md = pb(env, "show", str(run_id), "--format", "markdown").stdout
    assert md.startswith("### perfbench run") and "| case |" in md
    out = tmp_path / "run.json"
    r = pb(env, "show", str(run_id), "--format", "pyperf", "-o", str(out))
    assert r.returncode == 0, r.stderr
    st = subprocess.run([sys.executable, "-m", "pyperf", "stats", str(out)], capture_output=True, text=True)
    assert st.returncode == 0, st.stderr
    assert "RotaryEmbedding" in st.stdout


def test_latest_ignores_partial_runs(env, tmp_path):
    e = dict(env, PERFBENCH_DB=f"sqlite:///{tmp_path / 'latest.db'}")
    assert pb(e, "run", "--suite", TINY, "--quick", "--filter", "dtype=f32").returncode == 0
    r = pb(e, "show", "latest", "--suite", "tiny")
    assert r.returncode == 2 and "name a partial run by its ID" in r.stderr
    assert pb(e, "run", "--suite", TINY).returncode == 0  # the whole suite: not partial
    doc = json.loads(pb(e, "show", "latest", "--suite", "tiny", "--format", "json").stdout)
    assert doc["run"]["partial"] is False and doc["run"]["id"] == 2


def test_spin_on_measures_both_sides_spinning(env):
    r = pb(env, "run", "--suite", TINY, "--quick", "--spin", "on", "--dtype", "f32")
    assert r.returncode == 0, r.stderr
    run_id = db_rows(env, "select max(id) from runs")[0][0]
    rows = db_rows(env, "select spin, verdict from cells where run_id = ?", run_id)
    assert rows and {sp for sp, _ in rows} == {"on"}
    assert " spin" in r.stdout  # the table marks the spin policy


def test_a_second_run_waits_for_the_host_lock(env):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom perfbench.runner import host_lock, NullUI\n"
                               "with host_lock(NullUI()):\n    print('held', flush=True)\n    time.sleep(6)"],
        env=env, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    t0 = time.time()
    r = pb(env, "run", "--suite", TINY, "--quick", "--dtype", "f32", "--filter", "op=Softmax keys=64")
    waited = time.time() - t0
    holder.wait(timeout=30)
    assert r.returncode == 0, r.stderr
    assert "holds the host lock" in r.stderr and f"pid {holder.pid}" in r.stderr
    assert waited >= 3  # it measured only after the holder let go


def test_resume_refuses_other_settings_and_a_changed_suite(env, tmp_path):
    suite = tmp_path / "tiny.toml"
    suite.write_text(Path(TINY).read_text())
    r = pb(env, "run", "--suite", str(suite), "--max-time", "0.001", "--dtype", "f32")
    assert r.returncode == 0, r.stderr
    run_id = db_rows(env, "select max(id) from runs")[0][0]
    r = pb(env, "run", "--suite", str(suite), "--resume", str(run_id), "--quick")
    assert r.returncode == 2 and "drop --quick" in r.stderr
    suite.write_text(suite.read_text().replace("replicates = 3", "replicates = 4"))
    r = pb(env, "run", "--suite", str(suite), "--resume", str(run_id))
    assert r.returncode == 2 and "changed since run" in r.stderr


def test_failures_are_recorded_and_exit_1(env):
    r = pb(env, "run", "--suite", FAILING, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    run_id = db_rows(env, "select max(id) from runs")[0][0]
    rows = dict(db_rows(env, """select c.case_id, m.status from cells x join cases c on x.case_pk = c.id
                               join measurements m on m.cell_id = x.id
                               where x.run_id = ? and m.impl = 'ours'""", run_id))
    by_op = {cid.split(".")[0]: st for cid, st in rows.items()}
    assert by_op == {"CrashingOp": "crashed", "WrongOp": "mismatch", "RaisingOp": "error",
                     "HangingOp": "timeout", "Softmax": "ok"}
    assert db_rows(env, "select status from runs where id = ?", run_id)[0][0] == "complete"
    assert "FAIL" in r.stderr and "FAIL:crashed" in r.stdout
    # the run became tickets by itself: a wrong answer first, then each way ours failed to run
    assert "tickets: 4 opened" in r.stderr
    t = pb(env, "tickets", "--format", "json")
    assert t.returncode == 0, t.stderr
    got = {x["op"]: (x["kind"], x["state"]) for x in json.loads(t.stdout)["tickets"]}
    assert got == {"WrongOp": ("wrong-answer", "open"), "CrashingOp": ("broken", "open"),
                   "RaisingOp": ("broken", "open"), "HangingOp": ("broken", "open")}
    first = json.loads(t.stdout)["tickets"][0]
    assert first["kind"] == "wrong-answer" and first["reproduce"] == (
        "perfbench run --suite failing --threads 1 --dtype f32 --cache warm --spin off --device cpu "
        "--filter 'op=WrongOp batch=1 heads=2 keys=64 queries=1'")
    shown = pb(env, "tickets", "show", str(first["id"]))
    assert shown.returncode == 0 and "wrong answer in 1\\/1 cells" in shown.stdout and "err(ours)" in shown.stdout
    table = pb(env, "tickets")
    assert table.returncode == 0 and table.stdout.index("wrong-answer") < table.stdout.index("broken")
    assert pb(env, "tickets", "show", "999").returncode == 2
    # taking the same run in again changes nothing
    again = pb(env, "tickets", "update", str(run_id))
    assert again.returncode == 0 and "already taken in" in again.stdout


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_keeps_finished_cells_and_resume_finishes(env, sig, code):
    before = db_rows(env, "select coalesce(max(id), 0) from runs")[0][0]
    p = subprocess.Popen(perfbench_cmd() + ["run", "--suite", TINY, "--replicates", "4"], env=env, cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    run_id = None
    while time.time() < deadline:
        rows = db_rows(env, "select r.id, count(c.id) from runs r left join cells c on c.run_id = r.id "
                            "where r.id > ? group by r.id", before)
        if rows and rows[0][1] >= 1:
            run_id = rows[0][0]
            break
        time.sleep(0.2)
    assert run_id is not None, "no cell finished in time"
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == code, err
    status, message = db_rows(env, "select status, message from runs where id = ?", run_id)[0]
    assert status == "interrupted" and "--resume" in message
    kept = db_rows(env, "select count(*) from cells where run_id = ?", run_id)[0][0]
    assert kept >= 1
    planned = db_rows(env, "select cells_planned from runs where id = ?", run_id)[0][0]
    r = pb(env, "run", "--suite", TINY, "--resume", str(run_id))
    assert r.returncode == 0, r.stderr
    assert f"measuring {planned - kept} cells" in r.stderr
    total = db_rows(env, "select count(*) from cells where run_id = ?", run_id)[0][0]
    assert total == planned
    assert db_rows(env, "select status from runs where id = ?", run_id)[0][0] == "complete"


def test_max_time_stops_and_says_how_to_resume(env):
    r = pb(env, "run", "--suite", TINY, "--max-time", "0.001", "--dtype", "f32")
    assert r.returncode == 0, r.stderr
    assert "--max-time" in r.stderr and "--resume" in r.stderr
    run_id = db_rows(env, "select max(id) from runs")[0][0]
    status, partial = db_rows(env, "select status, partial from runs where id = ?", run_id)[0]
    assert status == "complete" and partial == 1
    assert db_rows(env, "select count(*) from cells where run_id = ?", run_id)[0][0] == 1


@pytest.mark.parametrize("args, needle", [
    (["run", "--suite", "no-such-suite"], "no suite 'no-such-suite'"),
    (["run", "--suite", TINY, "--filter", "keyz=1"], "did you mean 'keys'"),
    (["run", "--suite", TINY, "--filter", "keys"], "is not NAME=VALUE"),
    (["run", "--suite", TINY, "--dtype", "f64"], "unknown dtype 'f64'"),
    (["run", "--suite", TINY, "--db", "postgresql+psycopg://nobody@127.0.0.1:1/none"], "--db"),
    (["show", "HEAD~1"], "not a run reference"),
    (["show", "99999"], "no run 99999"),
])
def test_bad_input_exits_2_with_a_clear_message(env, args, needle):
    r = pb(env, *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert needle in r.stderr
    assert "Traceback" not in r.stderr


def test_list_prints_cells_without_measuring(env):
    before = db_rows(env, "select count(*) from runs")[0][0]
    r = pb(env, "list", "--suite", TINY)
    assert r.returncode == 0
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 10  # Softmax 2 keys + 1 numerics, Rotary 2 cases; x 2 dtypes
    assert sum("[numerics only]" in ln for ln in lines) == 2
    assert db_rows(env, "select count(*) from runs")[0][0] == before


def test_mutants_shows_every_negative_control_rejected(env):
    r = pb(env, "mutants", "--suite", TINY, "--all-shapes")  # its RotaryEmbedding block has no quick shapes
    assert r.returncode == 0, r.stderr
    # per (case, dtype): our kernel passes, every applicable mutant is rejected
    assert "ours" in r.stdout and "passes" in r.stdout and "ACCEPTED" not in r.stdout
    for op, mutant in (("Softmax", "max-subtraction skipped"), ("RotaryEmbedding", "rotary halves swapped")):
        assert any(line.startswith(op) and mutant in line and "rejected in" in line for line in r.stdout.splitlines())
    assert "0 problem(s)" in r.stdout


def test_mutants_reports_a_hole_in_the_gate(env):
    r = pb(env, "mutants", "--suite", str(ROOT / "tests" / "fixtures" / "mutant_hole.toml"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "a bug that changes nothing" in r.stdout and "ACCEPTED" in r.stdout
    assert "rejected in 0/2 cells" in r.stdout or "rejected in 0/1 cells" in r.stdout


@pytest.mark.parametrize("command", ["run", "list", "show", "runs", "peaks", "selfcheck", "build", "mutants", "tickets", "repro",
                                     "score"])
def test_help_teaches(env, command):
    r = pb(env, command, "--help")
    assert r.returncode == 0 and "Usage:" in r.stdout
    assert len(r.stdout.splitlines()) > 5


# ---- the measurement settings' bounds (suites.LIMITS), at the door: each option or suite key
# past its bound is exit 2 with a message naming it, the value, the bound and a fix, before the
# suite is expanded, the build or any measuring. Before: `run --replicates 1500` and
# `--processes 100` ran (the runner checked >= 2 and >= 1 only; processes = 10**9 built a list
# of a billion workers), timeout_s / block_ms = 100000 in a suite ran, and none of their runs
# could be imported. A filter that matches nothing makes an unchecked value fail fast, elsewhere.

NOTHING = ["--filter", "op=NoSuchOp"]


def _limit_suite(env, line: str) -> str:
    p = Path(env["_DB_PATH"]).parent / f"limit_{abs(hash(line))}.toml"
    p.write_text(f'[suite]\nname = "limits"\n{line}\n'
                 '[[ops]]\nop = "Softmax"\naxes = { heads = 2, queries = 1, keys = 64 }\n')
    return str(p)


@pytest.mark.parametrize("args, needle", [
    (["run", "--replicates", "1500"], "--replicates: 1500 is not an integer in 2..1000"),
    (["run", "--replicates", "1"], "--replicates: 1 is not an integer in 2..1000"),
    (["run", "--replicates", "0"], "--replicates: 0 is not an integer in 2..1000"),
    (["run", "--processes", "100"], "--processes: 100 is not an integer in 1..64"),
    (["run", "--processes", "1000000000"], "--processes: 1000000000 is not an integer in 1..64"),
    (["run", "--processes", "0"], "--processes: 0 is not an integer in 1..64"),
    (["ab", "--base-rev", "HEAD", "--replicates", "1001"], "--replicates: 1001 is not an integer in 2..1000"),
    (["ab", "--base-rev", "HEAD", "--processes", "65"], "--processes: 65 is not an integer in 1..64"),
    (["calibrate", "--replicates", "5000"], "--replicates: 5000 is not an integer in 2..1000"),
    (["calibrate", "--processes", "100"], "--processes: 100 is not an integer in 1..64"),
    (["calibrate", "--rounds", "101"], "--rounds: 101 is not an integer in 2..100"),
])
def test_options_past_their_bounds_exit_2(env, args, needle):
    r = pb(env, *args, "--suite", TINY, *NOTHING)
    assert r.returncode == 2, r.stdout + r.stderr
    assert needle in r.stderr and "give one in that range" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("line, needle", [
    ("timeout_s = 100000", "[suite] timeout_s: 100000 is not a number > 0 and <= 86400"),
    ("block_ms = 100000", "[suite] block_ms: 100000 is not a number > 0 and <= 60000"),
    ("replicates = 1500", "[suite] replicates: 1500 is not an integer in 2..1000"),
    ("processes = 100", "[suite] processes: 100 is not an integer in 1..64"),
    ("rounds = 1000", "[suite] rounds: 1000 is not an integer in 1..100"),
])
def test_suite_settings_past_their_bounds_exit_2(env, line, needle):
    suite = _limit_suite(env, line)
    r = pb(env, "run", "--suite", suite, *NOTHING)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{suite}: {needle}" in r.stderr and "give one in that range" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_resume_refuses_stored_settings_past_their_bounds(env, tmp_path):
    """A run stored by an older perfbench (or edited) with processes = 100: resumed, the runner
    would build that many workers. Before: it resumed (processes = 10**9: a billion Worker
    objects); now exit 2 naming the run, the setting and its bound."""
    suite = tmp_path / "tiny.toml"
    suite.write_text(Path(TINY).read_text())
    r = pb(env, "run", "--suite", str(suite), "--max-time", "0.001", "--dtype", "f32")
    assert r.returncode == 0, r.stderr
    run_id = db_rows(env, "select max(id) from runs")[0][0]
    con = sqlite3.connect(env["_DB_PATH"])
    try:
        con.execute("update runs set settings = json_set(settings, '$.processes', 100) where id = ?", (run_id,))
        con.commit()
    finally:
        con.close()
    r = pb(env, "run", "--suite", str(suite), "--resume", str(run_id))
    assert r.returncode == 2, r.stdout + r.stderr
    assert (f"run {run_id}'s settings: processes: 100 is not an integer in 1..64" in r.stderr
            and "start a new run instead" in r.stderr), r.stderr


@pytest.mark.parametrize("label, needle", [
    (b"ci\xff".decode(errors="surrogateescape"), "--runner-label: a lone surrogate '\\udcff' at 2"),  # bytes that are not UTF-8
    ("ci\x1b[2J", "--runner-label: a control or format character '\\x1b' at 2"),
    ("x" * 256, "--runner-label: longer than 255 characters"),
])
def test_runner_label_import_would_refuse_exits_2(env, label, needle):
    """--runner-label as `perfbench import` takes it. Before: a terminal escape was stored and the
    run's bundle refused on import; bytes that are not UTF-8 failed on flush with a traceback."""
    r = pb(env, "run", "--suite", TINY, "--runner-label", label, *NOTHING)
    assert r.returncode == 2, r.stdout + r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr, r.stderr
