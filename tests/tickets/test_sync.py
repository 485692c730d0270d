"""`perfbench tickets sync` against a local HTTP server that emulates GitHub's issues API and
records every request: create, idempotent re-sync, update, close, reopen, --max-new, pagination,
errors, dry run; only the sync's own issues are edited (a planted one with the marker is not);
and the CLI's exit codes."""

from __future__ import annotations

import subprocess
from urllib.parse import urlsplit

import pytest

from perfbench.github import GitHubClient, GitHubError
from perfbench.store import models as m
from perfbench.tickets import sync as sync_mod
from tests.conftest import perfbench_cmd
from tests.store.test_store import env  # noqa: F401  (fixture)
from tests.test_github import REPO, TOKEN, FakeGitHub, make_handler
from tests.test_github import serve as github_serve
from tests.tickets.test_lifecycle import Runs

BOT = "github-actions[bot]"  # the account the sync's token writes as


class IssuesFake(FakeGitHub):
    """The fake GitHub, with each issue's author (`user.login`, as GitHub sends it: issues the sync
    creates are BOT's) and GET /user answering `login` (None: 404, "": 403 as for GITHUB_TOKEN)."""

    def __init__(self):
        super().__init__()
        self.login: str | None = BOT

    def add_issue(self, title, body, labels=("perfbench",), state="open", pull_request=False, user=BOT):
        i = super().add_issue(title, body, labels, state, pull_request)
        i["user"] = {"login": user}
        return i


def handler(state: IssuesFake):
    base = make_handler(state)

    class Handler(base):
        def _handle(self):
            if urlsplit(self.path).path != "/api/v3/user" or state.login is None:
                return super()._handle()
            rec = self._record()
            if rec["method"] != "GET" or rec["headers"].get("Authorization") != f"Bearer {TOKEN}":
                return self._send(401, {"message": "Bad credentials"})
            if not state.login:
                return self._send(403, {"message": "Resource not accessible by integration"})
            return self._send(200, {"login": state.login, "id": 1})

        do_GET = do_POST = do_PATCH = _handle

    return Handler


def serve(state: IssuesFake):
    return github_serve(state, handler)


@pytest.fixture()
def runs(store, env):  # noqa: F811
    return Runs(store, env)


@pytest.fixture()
def gh(monkeypatch):
    monkeypatch.delenv(sync_mod.AUTHOR_ENV, raising=False)
    state = IssuesFake()
    with serve(state):
        yield state


def do_sync(store, gh, **kw):
    kw.setdefault("author", BOT)
    client = GitHubClient(REPO, token=TOKEN, api_url=gh.api_url, retry_delay=0.01)
    with store.session() as s:
        return sync_mod.sync(s, client, **kw)


def writes(gh):
    return [r for r in gh.requests if r["method"] != "GET"]


def test_create_then_a_second_sync_sends_no_writes(runs, store, gh):
    runs.take({(32, 1024): 1.6, (32, 4096): 2.4})
    res = do_sync(store, gh)
    assert [n for _, n in res.created] == [1]
    [post] = writes(gh)
    assert post["method"] == "POST" and post["path"] == f"/api/v3/repos/{REPO}/issues"
    assert post["json"]["labels"] == ["perfbench"] and post["json"]["title"].startswith("Softmax f32, 1 thread: losing")
    assert "<!-- perfbench-ticket " in post["json"]["body"] and "perfbench run --suite attention" in post["json"]["body"]
    assert post["headers"]["Authorization"] == f"Bearer {TOKEN}"
    gh.requests.clear()
    res = do_sync(store, gh)
    assert writes(gh) == [] and len(res.unchanged) == 1
    gets = [r["path"] for r in gh.requests]
    assert gets == [f"/api/v3/repos/{REPO}/issues?state=all&labels=perfbench&per_page=100"]
    with store.session() as s:
        assert s.query(m.Ticket).one().github == {REPO: 1}


def test_update_close_and_reopen_follow_the_ticket(runs, store, gh):
    runs.take({(32, 4096): 2.4})
    do_sync(store, gh)
    runs.take({(32, 1024): 1.6, (32, 4096): 2.4})  # the range grows: title and body change
    gh.requests.clear()
    res = do_sync(store, gh)
    [patch] = writes(gh)
    assert res.updated == [(1, 1)] and patch["method"] == "PATCH" and set(patch["json"]) == {"title", "body"}
    assert "losing 2/2 cells" in gh.issues[0]["title"]
    runs.take({})  # fixed
    gh.requests.clear()
    res = do_sync(store, gh)
    [patch] = writes(gh)
    assert res.closed == [(1, 1)] and patch["json"]["state"] == "closed"
    assert patch["json"]["state_reason"] == "completed" and gh.issues[0]["state"] == "closed"
    runs.take({(32, 4096): 2.0})  # regresses
    gh.requests.clear()
    res = do_sync(store, gh)
    assert res.reopened == [(1, 1)] and gh.issues[0]["state"] == "open" and len(gh.issues) == 1


def test_max_new_and_priority_order(runs, store, gh):
    runs.take({(32, 128): 3.0, (32, 1024): 1.5, (14, 4096): 2.0})  # three separate ranges
    res = do_sync(store, gh, max_new=2)
    assert len(res.created) == 2 and len(res.waiting) == 1
    # highest priority first: the largest excess time per call (3.0x: ~2 us, 2.0x: ~1 us, 1.5x: ~0.5 us)
    assert "heads 32, queries 1, keys 128)" in gh.issues[0]["title"]
    assert "heads 14, queries 1, keys 4096)" in gh.issues[1]["title"]
    res = do_sync(store, gh, max_new=2)
    assert len(res.created) == 1 and len(gh.issues) == 3 and not res.waiting


def test_existing_issue_found_on_a_later_page_not_duplicated(runs, store, gh):
    runs.take({(32, 4096): 2.4})
    do_sync(store, gh)
    for i in range(4):
        gh.add_issue(f"human {i}", "no marker here")
    gh.add_issue("a PR", gh.issues[0]["body"], pull_request=True)  # a PR carrying the marker is not ours
    gh.per_page_cap = 2
    with store.session() as s:  # forget the number: the marker alone must find it
        s.query(m.Ticket).one().github = {}
    gh.requests.clear()
    res = do_sync(store, gh)
    assert writes(gh) == [] and res.unchanged == [(1, 1)] and len(gh.issues) == 6
    assert sum(r["method"] == "GET" for r in gh.requests) == 3


@pytest.mark.parametrize("status,needle", [(403, "refused the token (403)"), (404, "not found (404)"),
                                           (422, "rejected the request (422)"), (502, "server error 502")])
def test_errors_are_clear_and_exit_5(runs, store, gh, db_url, cli_env, status, needle):
    runs.take({(32, 4096): 2.4})
    gh.fail[("GET", "issues")] = [status] * 6  # 5xx: 3 attempts each for the call and the CLI
    with pytest.raises(GitHubError):
        do_sync(store, gh)
    environ = {**cli_env, "PERFBENCH_DB": db_url, "GITHUB_TOKEN": TOKEN, sync_mod.AUTHOR_ENV: BOT}
    r = subprocess.run(perfbench_cmd() + ["tickets", "sync", "--repo", REPO, "--api-url", gh.api_url], env=environ,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 5 and needle in r.stderr and TOKEN not in r.stderr + r.stdout


def test_cli_dry_run_sends_nothing_and_needs_no_token(runs, gh, db_url, cli_env):
    runs.take({(32, 4096): 2.4})
    environ = {k: v for k, v in {**cli_env, "PERFBENCH_DB": db_url}.items() if k != "GITHUB_TOKEN"}
    r = subprocess.run(perfbench_cmd() + ["tickets", "sync", "--repo", REPO, "--api-url", gh.api_url, "--dry-run"],
                       env=environ, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert gh.requests == [] and "would create ticket 1" in r.stdout and "dry run: nothing sent" in r.stderr
    r = subprocess.run(perfbench_cmd() + ["tickets", "sync", "--repo", REPO, "--api-url", gh.api_url], env=environ,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "GITHUB_TOKEN is not set" in r.stderr


def test_dry_run_after_a_real_sync_checks_the_recorded_issues(runs, store, gh, db_url, cli_env):
    runs.take({(32, 4096): 2.4})
    do_sync(store, gh)
    gh.requests.clear()
    environ = {**cli_env, "PERFBENCH_DB": db_url}
    r = subprocess.run(perfbench_cmd() + ["tickets", "sync", "--repo", REPO, "--api-url", gh.api_url, "--dry-run"],
                       env=environ, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and gh.requests == []
    assert "would check ticket 1's issue #1" in r.stdout and "would create" not in r.stdout


def test_an_issue_whose_label_was_removed_is_fetched_not_duplicated(runs, store, gh):
    runs.take({(32, 4096): 2.4})
    do_sync(store, gh)
    gh.issues[0]["labels"] = []
    runs.take({(32, 1024): 1.6, (32, 4096): 2.4})
    gh.requests.clear()
    res = do_sync(store, gh)
    assert len(gh.issues) == 1 and res.updated == [(1, 1)]
    assert [r["method"] for r in gh.requests] == ["GET", "GET", "PATCH"]
    assert gh.requests[1]["path"] == f"/api/v3/repos/{REPO}/issues/1"


def test_a_create_that_fails_with_5xx_but_landed_is_not_duplicated(runs, store, gh):
    runs.take({(32, 4096): 2.4})
    gh.fail[("POST", "issues")] = [502]
    gh.create_anyway_on_fail = True
    with pytest.raises(GitHubError, match="502"):
        do_sync(store, gh)
    assert len(gh.issues) == 1
    res = do_sync(store, gh)  # the marker finds the issue that did land
    assert len(gh.issues) == 1 and res.unchanged == [(1, 1)]


def test_a_huge_range_stays_within_githubs_body_limit(runs, store):
    runs.take({(32, 4096): 2.4})
    with store.session() as s:
        t = s.query(m.Ticket).one()
        t.cells = [dict(t.cells[0], id=f"x{i}", case="c" * 150) for i in range(600)]
        body = sync_mod.issue_body(t, "hc")
    assert len(body) <= 65536 and body.rstrip().endswith(sync_mod.marker(t.uid))
    assert "and 480 more cells" in body


def test_titles_stay_within_githubs_limit_and_name_the_host_class_when_several(runs, store, gh):
    runs.take({(32, 4096): 2.4})
    with store.session() as s:
        t = s.query(m.Ticket).one()
        t.title = "x" * 300
        assert sync_mod.issue_title(t, False) == "x" * 255 + "…"
        withhc = sync_mod.issue_title(t, True)
        assert len(withhc) == 256 and withhc.endswith(f" [{t.host_class.key}]")


def test_a_planted_issue_with_the_marker_is_never_edited_or_closed(runs, store, gh):
    """Anyone can open an issue with the label and paste a ticket's marker: only issues the sync's
    own account opened are edited, closed or reopened; the ticket gets an issue of its own."""
    runs.take({(32, 4096): 2.4})
    with store.session() as s:
        t = s.query(m.Ticket).one()
        body = sync_mod.marker(t.uid)
    planted = gh.add_issue("planted", "click here " + body, user="mallory")  # #1, listed first
    res = do_sync(store, gh)
    assert res.created == [(1, 2)] and res.ignored == [(1, 1, "mallory")]
    assert [r["method"] for r in writes(gh)] == ["POST"]
    runs.take({(32, 1024): 1.6, (32, 4096): 2.4})  # the ticket changes: the real issue is updated
    res = do_sync(store, gh)
    assert res.updated == [(1, 2)]
    runs.take({})  # fixed: the real issue is closed
    res = do_sync(store, gh)
    assert res.closed == [(1, 2)] and gh.issues[1]["state"] == "closed"
    assert not [r for r in writes(gh) if r["path"].endswith("/issues/1")], "the planted issue was written to"
    assert planted["title"] == "planted" and planted["body"] == "click here " + body and planted["state"] == "open"


def test_a_recorded_issue_by_someone_else_is_not_taken_over(runs, store, gh):
    """A number recorded for the ticket (an older sync took it from the listing) whose issue another
    account opened: fetched, found foreign, left alone."""
    runs.take({(32, 4096): 2.4})
    with store.session() as s:
        t = s.query(m.Ticket).one()
        t.github = {REPO: 1}
        body = sync_mod.marker(t.uid)
    gh.add_issue("planted", body, labels=(), user="mallory")  # not in the label's listing
    res = do_sync(store, gh)
    assert res.ignored == [(1, 1, "mallory")] and res.created == [(1, 2)]
    assert [(r["method"], r["path"].split("?")[0].rsplit("/", 1)[-1]) for r in gh.requests] == [
        ("GET", "issues"), ("GET", "1"), ("POST", "issues")]
    with store.session() as s:
        assert s.query(m.Ticket).one().github == {REPO: 2}


def test_the_sync_account_comes_from_the_argument_the_environment_or_get_user(runs, store, gh, monkeypatch):
    runs.take({(32, 4096): 2.4})
    do_sync(store, gh)
    runs.take({(32, 1024): 1.6, (32, 4096): 2.4})
    gh.requests.clear()
    gh.login = ""  # GET /user refused (403), as for an Actions GITHUB_TOKEN: no guessing, no writes
    with pytest.raises(GitHubError, match=r"PERFBENCH_BOT_AUTHOR.*github-actions\[bot\]") as e:
        do_sync(store, gh, author=None)
    assert e.value.status == 403 and writes(gh) == []
    monkeypatch.setenv(sync_mod.AUTHOR_ENV, "GitHub-Actions[bot]")  # logins ignore case
    res = do_sync(store, gh, author=None)
    assert res.updated == [(1, 1)] and not res.ignored
    assert not [r for r in gh.requests if r["path"] == "/api/v3/user"][1:], "no GET /user with the variable set"
    monkeypatch.delenv(sync_mod.AUTHOR_ENV)
    gh.login = BOT  # a token that can read /user: asked once per sync
    gh.requests.clear()
    res = do_sync(store, gh, author=None)
    assert res.unchanged == [(1, 1)] and [r["path"] for r in gh.requests][0] == "/api/v3/user"
    gh.login = "someone-else"  # the token is another account: the bot's issue is not its own
    res = do_sync(store, gh, author=None)
    assert res.ignored == [(1, 1, BOT)] and res.created == [(1, 2)] and gh.issues[0]["state"] == "open"


def test_cli_leaves_a_planted_issue_alone(runs, gh, db_url, cli_env):
    runs.take({(32, 4096): 2.4})
    with runs.store.session() as s:
        body = sync_mod.marker(s.query(m.Ticket).one().uid)
    gh.add_issue("planted", body, user="mallory")
    environ = {**cli_env, "PERFBENCH_DB": db_url, "GITHUB_TOKEN": TOKEN, sync_mod.AUTHOR_ENV: BOT}
    r = subprocess.run(perfbench_cmd() + ["tickets", "sync", "--repo", REPO, "--api-url", gh.api_url], env=environ,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "issue #1 carries ticket 1's marker but was opened by mallory" in r.stderr and "created ticket 1 (issue #2)" in r.stdout
    assert gh.issues[0]["body"] == body and gh.issues[0]["title"] == "planted"


def test_cli_author_option_names_the_sync_account(runs, gh, db_url, cli_env):
    """--author (no environment variable) decides whose issues are ours: the bot's own issue is
    updated when --author names the bot, and left alone when --author names someone else."""
    runs.take({(32, 4096): 2.4})
    with runs.store.session() as s:
        body = sync_mod.marker(s.query(m.Ticket).one().uid)
    gh.add_issue("old title", body, user=BOT)
    environ = {**cli_env, "PERFBENCH_DB": db_url, "GITHUB_TOKEN": TOKEN}
    environ.pop(sync_mod.AUTHOR_ENV, None)
    base = perfbench_cmd() + ["tickets", "sync", "--repo", REPO, "--api-url", gh.api_url]
    r = subprocess.run(base + ["--author", "someone-else"], env=environ, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "opened by " + BOT in r.stderr and gh.issues[0]["title"] == "old title"
    r = subprocess.run(base + ["--author", BOT.upper()], env=environ, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert gh.issues[0]["title"] != "old title"  # ours (logins ignore case): brought up to date
