"""`perfbench ab`, `calibrate`, `calibration export`, `compare` and `render` end to end, as a
user runs them, in a scratch git repository holding a copy of this working tree: base is its
commit, head its working tree. Real builds of both revisions, real workers, real ORT, a real
SQLite file. Timing verdicts are never asserted (tests pin nothing to a timing); what is
asserted is deterministic: numerics, plumbing, storage, modes, exit codes."""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
import subprocess
import sys

import pytest

from perfbench.store.calibration import processes_of
from tests.conftest import ROOT, cli_environ

pytestmark = pytest.mark.slow
FILTERS = ["--filter", "op=Softmax keys=64 dtype=f32", "--filter", "op=RotaryEmbedding interleaved=0 dtype=f32"]


def _git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A git repository with this working tree (tracked + untracked, not ignored) committed."""
    d = tmp_path_factory.mktemp("ab")
    repo = d / "repo"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = ROOT / f
        if src.is_file():
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / f)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    env = cli_environ(d)
    env["PYTHONPATH"] = str(repo)  # the scratch copy's perfbench, not this checkout's
    env["PERFBENCH_BUILD_DIR"] = str(ROOT / "build" / "native")  # base = these sources: reuse their build
    env["PERFBENCH_DB"] = f"sqlite:///{d / 'results.db'}"
    return {"repo": repo, "env": env, "db": d / "results.db", "dir": d}


def pb(sc, *args, timeout=900):
    return subprocess.run([sys.executable, "-m", "perfbench.cli.main", *args], cwd=sc["repo"], env=sc["env"],
                          capture_output=True, text=True, timeout=timeout)


def rows(sc, sql, *params):
    con = sqlite3.connect(sc["db"])
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def test_ab_of_a_build_against_itself_stores_two_sides_and_a_comparison(scratch):
    tiny = str(scratch["repo"] / "tests" / "fixtures" / "tiny.toml")
    r = pb(scratch, "ab", "--base-rev", "HEAD", "--suite", tiny, *FILTERS, "--format", "json", "-o",
           str(scratch["dir"] / "aa.json"))
    assert r.returncode in (0, 1), r.stderr  # a timing flag is possible by chance; never a failure
    doc = json.loads((scratch["dir"] / "aa.json").read_text())
    assert doc["kind"] == "ab" and doc["settings"]["mode"] == "interleaved"
    assert doc["calibration"]["source"] == "default"  # nothing calibrated yet: stated default
    assert doc["base"]["git_sha"] and doc["head"]["ref"] == "worktree"
    assert not [rw for rw in doc["rows"] if rw["verdict"] in ("numerics-broke", "not-comparable")]
    timed = [rw for rw in doc["rows"] if rw["abs"]]
    assert len(timed) == 2 and all(rw["abs"]["n"] == 3 and rw["abs"]["sigma_source"] == "default" for rw in timed)
    assert "base: HEAD" in r.stderr and "head: worktree" in r.stderr
    origins = rows(scratch, "select origin, status from runs order by id")
    assert origins == [("ab-base", "complete"), ("ab-head", "complete")]
    assert rows(scratch, "select kind, exit_code from comparisons") == [("ab", doc["exit_code"])]
    assert len(rows(scratch, "select * from comparison_rows")) == len(doc["rows"])
    # the two sides were two loaded copies, each in its own path
    builds = rows(scratch, "select b.build_id from runs r join builds b on b.id = r.build_id")
    assert builds[0] == builds[1]
    assert (ROOT / "build" / "ab" / "sides" / f"base-{builds[0][0]}").is_dir()
    assert (ROOT / "build" / "ab" / "sides" / f"head-{builds[0][0]}").is_dir()
    # sides of a comparison are never history
    r2 = pb(scratch, "show", "latest")
    assert r2.returncode == 2 and "no complete" in r2.stderr


def test_calibrate_export_and_ab_with_the_calibration_file(scratch):
    tiny = str(scratch["repo"] / "tests" / "fixtures" / "tiny.toml")
    r = pb(scratch, "calibrate", "--suite", tiny, "--filter", "op=Softmax keys=64 dtype=f32", "--rounds", "2")
    assert r.returncode == 0, r.stderr
    assert "pooled sigma_b" in r.stdout and "Softmax" in r.stdout
    cal = rows(scratch, "select rounds, method from calibrations")
    assert cal[0][0] == 2 and "A/A" in cal[0][1]
    (sab,) = rows(scratch, "select sigma_ab from calibration_cells")[0]
    assert sab >= 0
    out = scratch["dir"] / "cal.json"
    assert pb(scratch, "calibration", "export", "-o", str(out)).returncode == 0
    data = json.loads(out.read_text())
    assert data["perfbench_calibration"] == 1 and len(data["cells"]) == 1
    r = pb(scratch, "ab", "--base-rev", "HEAD", "--suite", tiny, *FILTERS, "--calibration", str(out),
           "--format", "json", "-o", str(scratch["dir"] / "cal-ab.json"))
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads((scratch["dir"] / "cal-ab.json").read_text())
    by_op = {rw["op"]: rw for rw in doc["rows"] if rw["abs"]}
    assert by_op["Softmax"]["abs"]["sigma_source"] == "calibrated"
    assert by_op["Softmax"]["abs"]["sigma_b"] == pytest.approx(data["cells"][0]["sigma_ab"])
    assert by_op["RotaryEmbedding"]["abs"]["sigma_source"] == "default"
    assert doc["calibration"]["source"] == "mixed" and doc["calibration"]["age_s"] is not None
    # each side's stored run verdict folds in the calibrated sigma_b of the ratio, as a run's
    # does: a calibration that says 60% widens the stored Softmax interval past +/- 1.96 x 60%
    data["cells"][0]["sigma_ratio"] = 0.6
    wide = scratch["dir"] / "cal-wide.json"
    wide.write_text(json.dumps(data))
    r = pb(scratch, "ab", "--base-rev", "HEAD", "--suite", tiny, "--filter", "op=Softmax keys=64 dtype=f32",
           "--calibration", str(wide), "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    head_run = json.loads(r.stdout)["head"]["run_id"]
    ((lo, hi),) = rows(scratch, "select c.ratio_lo, c.ratio_hi from cells c join cases k on k.id = c.case_pk "
                                "where c.run_id = ? and k.op = 'Softmax' and c.numerics_only = 0", head_run)
    assert math.log(hi / lo) / 2 >= 1.96 * 0.6
    # a calibration measured over other worker processes is not used: its sigma_b holds the
    # process-level spread divided by their count (3 replicates: one process; 4: two)
    assert data["calibration"]["processes"] == 1
    r = pb(scratch, "ab", "--base-rev", "HEAD", "--suite", tiny, "--filter", "op=Softmax keys=64 dtype=f32",
           "--replicates", "4", "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    assert json.loads(r.stdout)["calibration"]["source"] == "default"  # the stored one (1 process) is not used
    r = pb(scratch, "ab", "--base-rev", "HEAD", "--suite", tiny, "--filter", "op=Softmax keys=64 dtype=f32",
           "--replicates", "4", "--calibration", str(out), "--format", "json")
    got = json.loads(r.stdout)
    assert got["calibration"]["source"] == "default"
    assert any("over 1 worker processes, the run over 2" in n for n in got["notes"]), got["notes"]
    # a calibration file from before the process count was stored says none: it is used
    legacy = json.loads(out.read_text())
    del legacy["calibration"]["processes"]
    (scratch["dir"] / "cal-legacy.json").write_text(json.dumps(legacy))
    r = pb(scratch, "ab", "--base-rev", "HEAD", "--suite", tiny, "--filter", "op=Softmax keys=64 dtype=f32",
           "--replicates", "4", "--calibration", str(scratch["dir"] / "cal-legacy.json"), "--format", "json")
    assert json.loads(r.stdout)["calibration"]["source"] != "default", r.stderr
    # nor is one measured under another protocol or ORT version (the database's are chosen so)
    for key, value, says in (("protocol_version", 3, "under protocol 3"), ("ort_version", "1.0.0", "onnxruntime 1.0.0")):
        other = json.loads(out.read_text())
        other["calibration"][key] = value
        (scratch["dir"] / "cal-other.json").write_text(json.dumps(other))
        r = pb(scratch, "ab", "--base-rev", "HEAD", "--suite", tiny, "--filter", "op=Softmax keys=64 dtype=f32",
               "--calibration", str(scratch["dir"] / "cal-other.json"), "--format", "json")
        got = json.loads(r.stdout)
        assert got["calibration"]["source"] == "default", key
        assert any(says in n and "not used" in n for n in got["notes"]), got["notes"]
    # a file that does not say its protocol or ORT version cannot be judged fit: refused
    for key in ("protocol_version", "ort_version"):
        other = json.loads(out.read_text())
        del other["calibration"][key]
        (scratch["dir"] / "cal-other.json").write_text(json.dumps(other))
        r = pb(scratch, "ab", "--base-rev", "HEAD", "--suite", tiny, "--calibration", str(scratch["dir"] / "cal-other.json"))
        assert r.returncode == 2 and f"calibration.{key} missing" in r.stderr, r.stderr
    # another host class's calibration is not used
    data["host_class"] = "Other CPU | 64 cores | Linux"
    out.write_text(json.dumps(data))
    r = pb(scratch, "ab", "--base-rev", "HEAD", "--suite", tiny, "--filter", "op=Softmax keys=64 dtype=f32",
           "--calibration", str(out), "--format", "json")
    assert json.loads(r.stdout)["calibration"]["source"] == "default"
    bad = scratch["dir"] / "bad.json"
    bad.write_text('{"perfbench_calibration": 99}')
    r = pb(scratch, "ab", "--base-rev", "HEAD", "--suite", tiny, "--calibration", str(bad))
    assert r.returncode == 2 and "not a perfbench calibration" in r.stderr


def test_compare_two_stored_runs_and_render_the_document(scratch):
    ids = [i for (i,) in rows(scratch, "select id from runs where origin like 'ab-%' order by id")][:2]
    if len(ids) < 2:
        pytest.skip("compares the runs of this module's earlier ab tests: run the module whole")
    r = pb(scratch, "compare", str(ids[0]), str(ids[1]), "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "compare" and doc["settings"]["mode"] == "stored-runs"
    timed = [rw for rw in doc["rows"] if rw["abs"]]
    assert timed and all(rw["ratio"] for rw in timed)
    path = scratch["dir"] / "cmp.json"
    path.write_text(r.stdout)
    md = pb(scratch, "render", str(path), "--format", "markdown")
    assert md.returncode == doc["exit_code"], md.stderr
    assert "What this cannot catch" in md.stdout
    doc["schema_version"] = 7
    path.write_text(json.dumps(doc))
    bad = pb(scratch, "render", str(path))
    assert bad.returncode == 2
    r = pb(scratch, "compare", str(ids[0]), str(ids[0]))
    assert r.returncode == 2 and "same run" in r.stderr
    # runs spread over different process counts: no calibration fits both, the default judges
    # (the module's first ab: 3 replicates, one process; the --replicates 4 ab: two). The head is
    # the 1-process run, which the stored 1-process calibration would fit on its own
    by_procs = {}
    for i, st in rows(scratch, "select id, settings from runs where origin = 'ab-head' order by id"):
        st = json.loads(st) if isinstance(st, str) else st
        by_procs.setdefault(processes_of(st), i)
    assert {1, 2} <= set(by_procs), by_procs
    r = pb(scratch, "compare", str(by_procs[2]), str(by_procs[1]), "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    got = json.loads(r.stdout)
    assert any("over 2 worker process(es), the head run over 1" in n for n in got["notes"]), got["notes"]
    assert all(rw["abs"]["sigma_source"] == "default" for rw in got["rows"] if rw["abs"])


def _native_file_with(repo, marker):
    """The one C file under native/cpu that defines `marker` (files move between families; the test follows)."""
    (hit,) = [p for p in (repo / "native" / "cpu").rglob("*.c") if marker in p.read_text()]
    return hit


def test_ab_catches_broken_numerics_and_measures_a_changed_interface_apart(scratch):
    """Head breaks RotaryEmbedding's numerics (❌, exit 1) and adds a field to pb_softmax_args
    (Softmax is then measured with each side's own checkout in alternating workers)."""
    repo = scratch["repo"]
    # rotary: rotate by the wrong pairing (halves <-> interleaved) in head
    marker = "int pb_rotary_embedding(const void *args) {"
    drivers = _native_file_with(repo, marker)
    text = drivers.read_text()
    text = text.replace(marker, marker + "\n    pb_rotary_embedding_args broken_ = *(const pb_rotary_embedding_args *)args;"
                        "\n    broken_.interleaved ^= 1;\n    args = &broken_;", 1)
    drivers.write_text(text)
    header = repo / "native" / "include" / "perfbench.h"
    h = header.read_text()
    old = "    void *y;\n} pb_softmax_args;"
    assert old in h
    header.write_text(h.replace(old, "    void *y;\n    int32_t reserved; /* head adds a field */\n} pb_softmax_args;"))
    tiny = str(repo / "tests" / "fixtures" / "tiny.toml")
    r = pb(scratch, "ab", "--base-rev", "HEAD", "--suite", tiny, *FILTERS, "--filter", "op=Softmax keys=33 dtype=f32",
           "--replicates", "4", "--format", "json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    by_op = {(rw["op"], rw["params"].get("keys")): rw for rw in doc["rows"]}
    rot = by_op[("RotaryEmbedding", None)]
    assert rot["verdict"] == "numerics-broke"
    assert rot["numerics"]["base_status"] == "ok" and rot["numerics"]["head_status"] == "mismatch"
    # Softmax in alternating workers: two turns of two replicates per side, paired
    assert by_op[("Softmax", 64)]["verdict"] != "numerics-broke" and by_op[("Softmax", 64)]["abs"]["n"] == 4
    # each side's replicates in one worker process: no calibration judges this mode, the default does
    assert by_op[("Softmax", 64)]["abs"]["sigma_source"] == "default"
    assert by_op[("Softmax", 64)]["abs"]["sigma_b"] == pytest.approx(2 ** 0.5 * 0.12)
    # its numerics-only cell is checked on both sides (not "only in base")
    odd = by_op[("Softmax", 33)]
    assert odd["numerics"]["base_status"] == odd["numerics"]["head_status"] == "ok", odd
    assert "numerics-only" in odd["why"]
    assert any("Softmax: pb_softmax_args or pb_softmax() changed" in n and "alternating" in n for n in doc["notes"])
    assert "alternating worker" in r.stderr
    assert doc["summary"]["numerics_broke"] == 1 and doc["exit_code"] == 1
    md = pb(scratch, "ab", "--base-rev", "HEAD", "--suite", tiny, "--filter", "op=RotaryEmbedding interleaved=0 "
            "dtype=f32", "--format", "markdown")
    assert md.returncode == 1 and "❌" in md.stdout


def test_a_head_that_crashes_is_numerics_broke_and_base_is_measured_alone(scratch):
    """Head traps (SIGILL) in Softmax: the shared worker dies during head's numerics; base gets its own
    verdict from a worker of its own, head is ❌ crashed, exit 1."""
    repo = scratch["repo"]
    subprocess.run(["git", "checkout", "--", "native"], cwd=repo, check=True)
    marker = "int pb_softmax(const void *args) {"
    drivers = _native_file_with(repo, marker)
    drivers.write_text(drivers.read_text().replace(marker, marker + "\n    __builtin_trap();", 1))
    tiny = str(repo / "tests" / "fixtures" / "tiny.toml")
    r = pb(scratch, "ab", "--base-rev", "HEAD", "--suite", tiny, "--filter", "op=Softmax keys=64 dtype=f32",
           "--format", "json")
    assert r.returncode == 1, r.stderr
    (row,) = json.loads(r.stdout)["rows"]
    assert row["verdict"] == "numerics-broke"
    assert row["numerics"]["head_status"] == "crashed" and row["numerics"]["base_status"] == "ok", row
    base_msg = rows(scratch, "select m.message from measurements m join cells c on c.id = m.cell_id join runs r on "
                             "r.id = c.run_id where r.origin = 'ab-base' and m.impl = 'ours' order by m.id desc")[0][0]
    assert "measured alone" in base_msg


def test_ab_pairs_ops_whose_kernel_name_is_not_their_op_name(scratch):
    """FastGelu calls pb_gelu, SkipLayerNormalization pb_layer_norm, Add pb_add with pb_binary_args:
    an A/A comparison measures both sides of each (a name derived from the op made them 'only in
    head (new cell)', so the PR bot could never flag them)."""
    r = pb(scratch, "ab", "--base-rev", "HEAD", "--suite", "norms", "--replicates", "2", "--format", "json",
           "--filter", "op=SkipLayerNormalization rows=1 hidden=4096 dtype=f32 threads=1 cache=warm")
    assert r.returncode in (0, 1), r.stderr
    (row,) = json.loads(r.stdout)["rows"]
    assert row["verdict"] != "not-comparable", row
    assert row["numerics"]["base_status"] == row["numerics"]["head_status"] == "ok", row
    assert "measured on the other side only" not in r.stderr
