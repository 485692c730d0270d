"""Stored strings reach the terminal through one escaping function (issue 25, item 6): an imported
bundle's hostname or branch carrying OSC/CSI escapes cannot retitle the terminal or write the
clipboard; ids too large for the database are a clear error, not a traceback."""

from __future__ import annotations

import subprocess

from perfbench.compare.escape import term
from perfbench.compare.render import grid
from perfbench.store import repo
from perfbench.store.db import Store
from tests.conftest import ROOT, cli_environ, perfbench_cmd
from tests.store.test_store import BUILD, add_run, facts

OSC_TITLE = "\x1b]0;pwned\x07"
OSC_CLIPBOARD = "\x1b]52;c;ZWNobyBoaQ==\x07"
CSI = "\x1b[2J"


def pb(env, *args, timeout=120):
    return subprocess.run(perfbench_cmd() + list(args), env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def test_term_keeps_text_and_neutralises_controls():
    assert term("Zen 5 host-a µs ✅") == "Zen 5 host-a µs ✅"
    for bad in (OSC_TITLE, OSC_CLIPBOARD, CSI, "a\rb", "a\nb", "\u202eevil", "\x9b31m"):
        out = term(bad)
        assert not any(ch in out for ch in "\x1b\x07\r\n\u202e\x9b"), repr(out)


def test_grid_escapes_every_cell():
    out = grid(["case"], [[f"heads=1{CSI}"]])
    assert "\x1b" not in out


def test_runs_listing_escapes_stored_strings(tmp_path):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    st = Store(url)
    with st.session() as s:
        h = repo.ensure_host(s, facts(hostname="evil" + OSC_TITLE))
        b = repo.ensure_build(s, BUILD)
        env = type("E", (), {"host_id": h.id, "hc_id": h.host_class_id, "build_pk": b.id})
        add_run(s, env, suite="attention" + CSI, branch="main" + OSC_CLIPBOARD, hostname="evil" + OSC_TITLE,
                invalidated=True, invalidated_why="why" + OSC_TITLE)
    st.dispose()
    r = pb(cli_environ(tmp_path), "runs", "--db", url)
    assert r.returncode == 0, r.stderr
    assert "evil" in r.stdout and "main" in r.stdout and "INVALIDATED" in r.stdout
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout


def test_ids_beyond_64_bits_are_a_clear_error(tmp_path):
    env = cli_environ(tmp_path)
    huge = "99999999999999999999999"
    for args in (("show", huge), ("tickets", "show", huge), ("runs", "invalidate", huge, "--why", "x"),
                 ("tickets", "update", huge)):
        r = pb(env, *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr, (args, r.stderr)
        assert huge in r.stderr, (args, r.stderr)


def test_grid_escapes_headers_too():
    """`perfbench score` puts each run's git sha in a header: an imported sha with OSC escapes."""
    out = grid(["op", "run 1 " + OSC_TITLE], [["Softmax", "90%"]])
    assert "\x1b" not in out and "\x07" not in out and "run 1" in out


def test_calibration_table_escapes_stored_strings():
    from perfbench.cli.compare_cmds import _calibration_table

    cal = {"calibration": {"id": 1, "rounds": 3, "created_at": "2026-12-03", "pooled": {"ratio": 0.05}},
           "host_class": "hc" + OSC_TITLE,
           "cells": [{"case_id": "Softmax" + CSI, "dtype": "f32" + OSC_CLIPBOARD, "threads": 1, "cache": "warm",
                      "sigma_ab": 0.01, "sigma_ours": 0.02, "sigma_ort": 0.03, "sigma_ratio": 0.04}]}
    out = _calibration_table(cal)
    assert "\x1b" not in out and "\x07" not in out and "Softmax" in out


def test_json_text_escapes_what_json_leaves_raw():
    import json

    from perfbench.compare.escape import json_text

    doc = {"branch": "main\x9b31m\u202e", "ok": "µ ✅"}
    out = json_text(json.dumps(doc, ensure_ascii=False))
    assert not any(ch in out for ch in "\x9b\u202e") and "µ ✅" in out
    assert json.loads(out) == doc

