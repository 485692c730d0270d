"""perfbench/github.py, `perfbench bot comment` and `perfbench bot pr-number` against a local HTTP
server that emulates GitHub's issue-comment and pull-request endpoints and records every request
it gets. (tests/test_workflows.py reuses the server for ci/post-comment.sh.)"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from perfbench import github as gh
from perfbench.errors import UsageError
from perfbench.github import BODY_LIMIT, MARKER, GitHubClient, GitHubError, NoSinglePullRequest
from tests.conftest import ROOT, perfbench_cmd

TOKEN = "ghp_SECRET_TEST_TOKEN_123"
REPO = "octo-org/kernels"


class FakeGitHub:
    """State of the fake: comments per PR, a request log, and scripted failures
    (`fail[(method, kind)] = [status, ...]` consumed one per matching request; kind is
    "list", "create" or "update")."""

    def __init__(self):
        self.comments: dict[int, list[dict]] = {}
        self.requests: list[dict] = []
        self.fail: dict[tuple[str, str], list[int]] = {}
        self.fail_headers: dict[str, str] = {}
        self.fail_body: dict = {"message": "Something failed"}
        self.per_page_cap = 100  # the page size the fake really serves (GitHub caps at 100)
        self.next_id = 1000
        self.create_anyway_on_fail = False  # a POST that 5xx's but did create the comment
        self.pulls: list[dict] = []  # pull requests, as GitHub lists them (see add_pull)
        self.issues: list[dict] = []  # issues (and PRs, as GitHub's /issues lists both)
        self.lock = threading.Lock()

    def add_issue(self, title, body, labels=("perfbench",), state="open", pull_request=False):
        self.next_id += 1
        i = {"number": len(self.issues) + 1, "id": self.next_id, "title": title, "body": body, "state": state,
             "labels": [{"name": n} for n in labels],
             "html_url": f"https://github.example/{REPO}/issues/{len(self.issues) + 1}"}
        if pull_request:
            i["pull_request"] = {"url": "x"}
        self.issues.append(i)
        return i

    def add_pull(self, number, sha, state="open", branch="feature", owner=None, commits=None):
        """A PR whose head is `sha` on OWNER:BRANCH (owner: the repo's, or a fork's); `commits`
        are the commits GitHub associates it with (default: its head)."""
        owner = owner or REPO.split("/")[0]
        p = {"number": number, "state": state,
             "html_url": f"https://github.example/{REPO}/pull/{number}",
             "head": {"sha": sha, "ref": branch, "label": f"{owner}:{branch}",
                      "repo": {"full_name": f"{owner}/kernels", "owner": {"login": owner}}},
             "base": {"ref": "main", "repo": {"full_name": REPO}},
             "_commits": list(commits or [sha])}
        self.pulls.append(p)
        return p

    def add(self, pr, body, user="someone"):
        self.next_id += 1
        c = {"id": self.next_id, "body": body, "user": {"login": user},
             "created_at": "2024-01-01T00:00:%02dZ" % (self.next_id % 60),
             "html_url": f"https://github.example/{REPO}/pull/{pr}#issuecomment-{self.next_id}"}
        self.comments.setdefault(pr, []).append(c)
        return c

    def total(self):
        return sum(len(v) for v in self.comments.values())


def make_handler(state: FakeGitHub):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep test output quiet
            pass

        def _send(self, status, payload, headers=None):
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)

        def _record(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n)) if n else None
            rec = {"method": self.command, "path": self.path, "headers": dict(self.headers.items()), "json": body}
            with state.lock:
                state.requests.append(rec)
            return rec

        def _scripted_failure(self, kind):
            queue = state.fail.get((self.command, kind))
            if queue:
                status = queue.pop(0)
                return status
            return None

        def _paged(self, url, items):
            """One page of `items` as GitHub serves it (per_page capped, a Link header)."""
            q = parse_qs(url.query)
            per = min(int(q.get("per_page", ["30"])[0]), state.per_page_cap)
            page = int(q.get("page", ["1"])[0])
            pages = max(1, -(-len(items) // per))
            links = []
            rest = urlencode([(k, v[0]) for k, v in q.items() if k not in ("page", "per_page")])
            base = f"http://{self.headers['Host']}{url.path}?" + (rest + "&" if rest else "")
            if page < pages:
                links.append(f'<{base}per_page={per}&page={page + 1}>; rel="next"')
                links.append(f'<{base}per_page={per}&page={pages}>; rel="last"')
            hdr = {"Link": ", ".join(links)} if links else {}
            public = [{k: v for k, v in p.items() if not k.startswith("_")} for p in items]
            return self._send(200, public[(page - 1) * per: page * per], hdr)

        def _pulls(self, url):
            """Answer GET /pulls?state=&head=OWNER:BRANCH or GET /commits/{sha}/pulls: True if it did."""
            m_pulls = re.fullmatch(rf"/api/v3/repos/{REPO}/pulls", url.path)
            m_commit = re.fullmatch(rf"/api/v3/repos/{REPO}/commits/([0-9a-f]{{40}})/pulls", url.path)
            if self.command != "GET" or not (m_pulls or m_commit):
                return False
            status = self._scripted_failure("pulls")
            if status is not None:
                self._send(status, state.fail_body, state.fail_headers)
            elif m_commit:  # GitHub: the PRs associated with the commit, in any state
                self._paged(url, [p for p in state.pulls if m_commit.group(1) in p["_commits"]])
            else:
                q = parse_qs(url.query)
                want = q.get("state", ["open"])[0]
                items = [p for p in state.pulls if want == "all" or p["state"] == want]
                if "head" in q:
                    items = [p for p in items if p["head"]["label"] == q["head"][0]]
                self._paged(url, items)
            return True

        def _issues(self, url, rec):
            """GET/POST /repos/R/issues and PATCH /repos/R/issues/N: True if it answered."""
            m_all = re.fullmatch(rf"/api/v3/repos/{REPO}/issues", url.path)
            m_one = re.fullmatch(rf"/api/v3/repos/{REPO}/issues/(\d+)", url.path)
            if not (m_all and self.command in ("GET", "POST")) and not (m_one and self.command in ("GET", "PATCH")):
                return False
            status = self._scripted_failure("issues")
            if status is not None:
                if status >= 500 and m_all and self.command == "POST" and state.create_anyway_on_fail:
                    body = rec["json"]
                    state.add_issue(body["title"], body["body"], body.get("labels", []))
                self._send(status, state.fail_body, state.fail_headers)
            elif m_all and self.command == "GET":
                q = parse_qs(url.query)
                want, label = q.get("state", ["open"])[0], q.get("labels", [None])[0]
                items = [i for i in state.issues if (want == "all" or i["state"] == want)
                         and (label is None or label in [x["name"] for x in i["labels"]])]
                self._paged(url, items)
            elif m_all:
                body = rec["json"]
                i = state.add_issue(body["title"], body["body"], body.get("labels", []))
                self._send(201, i)
            else:
                n = int(m_one.group(1))
                if not 1 <= n <= len(state.issues):
                    self._send(404, {"message": "Not Found"})
                elif self.command == "GET":
                    self._send(200, state.issues[n - 1])
                else:
                    i = state.issues[n - 1]
                    i.update({k: v for k, v in rec["json"].items() if k in ("title", "body", "state", "state_reason")})
                    self._send(200, i)
            return True

        def _handle(self):
            rec = self._record()
            url = urlsplit(self.path)
            if self._pulls(url) or self._issues(url, rec):
                return None
            m_list = re.fullmatch(rf"/api/v3/repos/{REPO}/issues/(\d+)/comments", url.path)
            m_upd = re.fullmatch(rf"/api/v3/repos/{REPO}/issues/comments/(\d+)", url.path)
            kind = "list" if (m_list and self.command == "GET") else "create" if m_list else "update"
            status = self._scripted_failure(kind)
            if status is not None:
                if status >= 500 and kind == "create" and state.create_anyway_on_fail:
                    state.add(int(m_list.group(1)), rec["json"]["body"], user="github-actions[bot]")
                return self._send(status, state.fail_body, state.fail_headers)
            if m_list and self.command == "GET":
                pr = int(m_list.group(1))
                if pr not in state.comments:
                    return self._send(404, {"message": "Not Found"})
                q = parse_qs(url.query)
                per = min(int(q.get("per_page", ["30"])[0]), state.per_page_cap)
                page = int(q.get("page", ["1"])[0])
                items = state.comments[pr]
                pages = max(1, -(-len(items) // per))
                links = []
                base = f"http://{self.headers['Host']}{url.path}"
                if page < pages:
                    links.append(f'<{base}?per_page={per}&page={page + 1}>; rel="next"')
                    links.append(f'<{base}?per_page={per}&page={pages}>; rel="last"')
                hdr = {"Link": ", ".join(links)} if links else {}
                return self._send(200, items[(page - 1) * per: page * per], hdr)
            if m_list and self.command == "POST":
                pr = int(m_list.group(1))
                if pr not in state.comments:
                    return self._send(404, {"message": "Not Found"})
                c = state.add(pr, rec["json"]["body"], user="github-actions[bot]")
                return self._send(201, c)
            if m_upd and self.command == "PATCH":
                cid = int(m_upd.group(1))
                for cs in state.comments.values():
                    for c in cs:
                        if c["id"] == cid:
                            c["body"] = rec["json"]["body"]
                            return self._send(200, c)
                return self._send(404, {"message": "Not Found"})
            return self._send(404, {"message": "Not Found"})

        do_GET = do_POST = do_PATCH = _handle

    return Handler


@contextlib.contextmanager
def serve(state: FakeGitHub, handler=None):
    """The fake on a local port while the block runs (state.api_url is its API root); `handler`
    (state -> handler class) extends make_handler, as the tickets sync tests do."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), (handler or make_handler)(state))
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    state.api_url = f"http://127.0.0.1:{httpd.server_address[1]}/api/v3"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture()
def server():
    state = FakeGitHub()
    state.comments[7] = []
    with serve(state):
        yield state


def client(server, **kw):
    kw.setdefault("token", TOKEN)
    kw.setdefault("retry_delay", 0.01)
    return GitHubClient(REPO, api_url=server.api_url + "/", **kw)


# -- the client ---------------------------------------------------------------------------------


def test_create_then_update_not_duplicate(server):
    server.add(7, "an unrelated human comment")
    c = client(server)
    action, url = c.upsert_pr_comment(7, "first report")
    assert action == "created" and url and url.endswith(f"#issuecomment-{server.next_id}")
    assert server.total() == 2
    ours = server.comments[7][-1]
    assert ours["body"].startswith("first report") and ours["body"].endswith(MARKER)
    post = [r for r in server.requests if r["method"] == "POST"]
    assert len(post) == 1 and post[0]["path"] == f"/api/v3/repos/{REPO}/issues/7/comments"

    action2, url2 = c.upsert_pr_comment(7, "second report")
    assert (action2, url2) == ("updated", url)
    assert server.total() == 2  # updated in place, no duplicate
    assert server.comments[7][-1]["body"].startswith("second report")
    assert server.comments[7][0]["body"] == "an unrelated human comment"
    patch = [r for r in server.requests if r["method"] == "PATCH"]
    assert len(patch) == 1 and patch[0]["path"] == f"/api/v3/repos/{REPO}/issues/comments/{ours['id']}"
    assert sum(r["method"] == "POST" for r in server.requests) == 1


def test_headers_and_auth(server):
    client(server).upsert_pr_comment(7, "x")
    assert server.requests
    for r in server.requests:
        h = {k.lower(): v for k, v in r["headers"].items()}
        assert h["authorization"] == f"Bearer {TOKEN}"
        assert h["accept"] == "application/vnd.github+json"
        assert h["x-github-api-version"] == "2022-11-28"
        assert h["user-agent"] == "perfbench"
    assert server.requests[0]["path"].endswith("/issues/7/comments?per_page=100")


def test_marker_on_middle_page_found_via_pagination(server):
    server.per_page_cap = 2  # 6 comments -> 3 pages; ours is on page 2
    for i in range(6):
        server.add(7, f"comment {i}" + (f"\n{MARKER}" if i == 3 else ""))
    action, _ = client(server).upsert_pr_comment(7, "new body")
    assert action == "updated"
    assert server.total() == 6
    assert server.comments[7][3]["body"].startswith("new body")
    gets = [r["path"] for r in server.requests if r["method"] == "GET"]
    assert len(gets) == 3 and gets[1].endswith("page=2") and gets[2].endswith("page=3")


def test_newest_marked_comment_wins(server):
    old = server.add(7, "old " + MARKER)
    new = server.add(7, "newer " + MARKER)
    client(server).upsert_pr_comment(7, "body")
    assert server.comments[7][1]["body"].startswith("body")
    assert server.comments[7][0]["body"] == old["body"] and new["id"] == server.comments[7][1]["id"]


def test_a_marker_pasted_by_someone_else_is_not_ours_to_update(server, env, tmp_path):
    server.add(7, "mallory copied the marker " + MARKER, user="mallory")
    action, _ = client(server).upsert_pr_comment(7, "report", author="github-actions[bot]")
    assert action == "created" and server.comments[7][0]["body"].startswith("mallory")
    body = tmp_path / "b.md"
    body.write_text("second report")
    r = pb(env, "--pr", "7", "--body", str(body), "--api-url", server.api_url)
    assert r.returncode == 0 and "updated" in r.stdout, r.stderr  # its own comment (github-actions[bot])
    assert server.comments[7][0]["body"].startswith("mallory") and server.comments[7][1]["body"].startswith("second")


def test_custom_marker(server):
    server.add(7, "posted by default marker\n" + MARKER)
    action, _ = client(server).upsert_pr_comment(7, "b", marker="<!-- other -->")
    assert action == "created" and server.total() == 2
    assert server.comments[7][-1]["body"].endswith("<!-- other -->")


def test_rate_limit_403(server):
    server.fail[("GET", "list")] = [403]
    server.fail_headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1700000000"}
    server.fail_body = {"message": "API rate limit exceeded for installation"}
    with pytest.raises(GitHubError) as ei:
        client(server).upsert_pr_comment(7, "x")
    assert ei.value.status == 403 and ei.value.exit_code == 5
    assert "rate limit" in str(ei.value) and "X-RateLimit-Remaining: 0" in str(ei.value)
    assert TOKEN not in str(ei.value) and TOKEN not in repr(ei.value)


def test_403_permissions(server):
    server.fail[("POST", "create")] = [403]
    server.fail_body = {"message": "Resource not accessible by integration"}
    with pytest.raises(GitHubError) as ei:
        client(server).upsert_pr_comment(7, "x")
    msg = str(ei.value)
    assert "refused the token" in msg and "issues: write" in msg and REPO in msg
    assert "Resource not accessible by integration" in msg and "rate limit" not in msg
    assert TOKEN not in msg


def test_404(server):
    with pytest.raises(GitHubError) as ei:
        client(server).upsert_pr_comment(99, "x")  # the fake has no PR 99
    assert ei.value.status == 404
    assert "not found" in str(ei.value) and REPO in str(ei.value) and "#99" in str(ei.value)
    assert sum(r["method"] == "GET" for r in server.requests) == 1  # a 404 is not retried


def test_422_propagates_githubs_message(server):
    server.fail[("POST", "create")] = [422]
    server.fail_body = {"message": "Validation Failed",
                        "errors": [{"resource": "IssueComment", "code": "custom", "message": "Body is too long"}]}
    with pytest.raises(GitHubError) as ei:
        client(server).upsert_pr_comment(7, "x")
    assert ei.value.status == 422
    assert "422" in str(ei.value) and "Validation Failed" in str(ei.value) and "Body is too long" in str(ei.value)


def test_500_then_success_is_retried(server):
    server.fail[("GET", "list")] = [500, 502]
    lines = []
    action, _ = client(server, log=lines.append).upsert_pr_comment(7, "x")
    assert action == "created"
    assert sum(r["method"] == "GET" for r in server.requests) == 3
    assert sum("retrying" in line for line in lines) == 2


def test_500_forever_is_a_clear_error(server):
    server.fail[("PATCH", "update")] = [500] * 10
    server.add(7, MARKER)
    with pytest.raises(GitHubError) as ei:
        client(server).upsert_pr_comment(7, "x")
    assert ei.value.status == 500
    assert "server error 500" in str(ei.value) and "after 3 attempts" in str(ei.value)
    assert sum(r["method"] == "PATCH" for r in server.requests) == 3


def test_post_5xx_that_landed_is_not_duplicated(server):
    server.fail[("POST", "create")] = [502]
    server.create_anyway_on_fail = True
    action, url = client(server).upsert_pr_comment(7, "x")
    assert action == "created" and url
    assert server.total() == 1
    assert sum(r["method"] == "POST" for r in server.requests) == 1


def test_post_5xx_that_did_not_land_is_retried(server):
    server.fail[("POST", "create")] = [503]
    action, _ = client(server).upsert_pr_comment(7, "x")
    assert action == "created" and server.total() == 1
    assert sum(r["method"] == "POST" for r in server.requests) == 2


def test_network_error_names_url_not_token():
    c = GitHubClient(REPO, token=TOKEN, api_url="http://127.0.0.1:9/api", retry_delay=0.01, timeout=5)
    with pytest.raises(GitHubError) as ei:
        c.list_issue_comments(1)
    assert ei.value.status is None
    assert "cannot reach GitHub at http://127.0.0.1:9/api/repos/" in str(ei.value)
    assert TOKEN not in str(ei.value)


def test_token_never_in_repr_or_errors(server):
    c = client(server)
    assert TOKEN not in repr(c) and "***" in repr(c)
    server.fail_body = {"message": f"echoing your token {TOKEN} back"}  # a hostile or buggy server
    for status in (401, 403, 404, 422, 500):
        server.fail[("GET", "list")] = [status] * 3
        with pytest.raises(GitHubError) as ei:
            c.list_issue_comments(7)
        assert TOKEN not in str(ei.value), status
        assert "***" in str(ei.value)


def test_dry_run_sends_nothing_and_needs_no_token(server, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    lines = []
    c = GitHubClient(REPO, api_url=server.api_url, dry_run=True, log=lines.append)
    assert c.upsert_pr_comment(7, "hello") == ("dry-run", None)
    assert server.requests == []
    out = "\n".join(lines)
    assert "GET " + server.api_url + f"/repos/{REPO}/issues/7/comments?per_page=100" in out
    assert "POST" in out and "PATCH" in out and "hello" in out and MARKER in out


def test_missing_token_is_a_usage_error(monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    with pytest.raises(UsageError, match="GITHUB_TOKEN is not set"):
        GitHubClient(REPO)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    assert GitHubClient(REPO)._token == TOKEN


@pytest.mark.parametrize("repo", ["kernels", "a/b/c", "/b", "a/", "a b/c", "a/..", ""])
def test_bad_repo(repo):
    with pytest.raises(UsageError, match="OWNER/NAME"):
        GitHubClient(repo, token=TOKEN)


def test_api_url_resolution(monkeypatch):
    monkeypatch.delenv("GITHUB_API_URL", raising=False)
    assert gh.resolve_api_url() == "https://api.github.com"
    monkeypatch.setenv("GITHUB_API_URL", "https://ghe.example/api/v3/")
    assert gh.resolve_api_url() == "https://ghe.example/api/v3"
    assert gh.resolve_api_url("http://127.0.0.1:8080/") == "http://127.0.0.1:8080"
    with pytest.raises(UsageError):
        gh.resolve_api_url("ftp://x")


def test_next_page_on_another_host_is_refused(server, monkeypatch):
    real = gh.GitHubClient._request_once

    def once(self, method, url, data=None, what=""):
        payload, headers = real(self, method, url, data, what)
        headers = dict(headers)
        headers["Link"] = '<https://evil.example/steal?page=2>; rel="next"'
        return payload, headers

    monkeypatch.setattr(gh.GitHubClient, "_request_once", once)
    with pytest.raises(GitHubError, match="another host"):
        client(server).list_issue_comments(7)


def test_long_body_truncated_with_note_and_marker(server):
    body = "x" * (BODY_LIMIT + 5000)
    client(server).upsert_pr_comment(7, body)
    posted = server.comments[7][-1]["body"]
    assert len(posted) <= BODY_LIMIT
    assert posted.endswith(MARKER)
    assert "Truncated by perfbench" in posted and str(len(body) + 2 + len(MARKER)) in posted
    assert posted.startswith("x" * 60000)
    # exactly at the limit: untouched
    fits = "y" * (BODY_LIMIT - len(MARKER) - 2)
    assert gh.with_marker(fits) == fits + "\n\n" + MARKER


def test_marker_not_doubled():
    assert gh.with_marker("a\n\n" + MARKER) == "a\n\n" + MARKER
    assert gh.with_marker("a") == "a\n\n" + MARKER


# -- the command, end to end --------------------------------------------------------------------


@pytest.fixture()
def env(tmp_path):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    e["GITHUB_TOKEN"] = TOKEN
    e["NO_PROXY"] = e["no_proxy"] = "127.0.0.1"
    e.pop("GITHUB_API_URL", None)
    return e


def pb(env, *args, stdin=None):
    return subprocess.run(perfbench_cmd() + ["bot", "comment", "--repo", REPO] + list(args), env=env,
                          capture_output=True, text=True, timeout=60, cwd=ROOT, input=stdin)


def test_cli_create_then_update(server, env, tmp_path):
    f = tmp_path / "report.md"
    f.write_text("# perfbench\nall fast\n")
    env["GITHUB_API_URL"] = server.api_url  # the env var works as --api-url does
    r = pb(env, "--pr", "7", "--body", str(f))
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"created comment https://github\.example/\S+#issuecomment-\d+\n", r.stdout)
    r2 = pb(env, "--pr", "7", "--body", "-", stdin="# perfbench\nnow slower\n")
    assert r2.returncode == 0, r2.stderr
    assert r2.stdout.startswith("updated comment ") and r2.stdout.split()[-1] == r.stdout.split()[-1]
    assert server.total() == 1 and "now slower" in server.comments[7][0]["body"]
    for res in (r, r2):
        assert TOKEN not in res.stdout + res.stderr
    assert all(rq["headers"].get("Authorization") == f"Bearer {TOKEN}" for rq in server.requests)


def test_cli_github_error_exit_code_and_no_token_leak(server, env, tmp_path):
    f = tmp_path / "report.md"
    f.write_text("hi")
    server.fail[("GET", "list")] = [403]
    server.fail_headers = {"X-RateLimit-Remaining": "0"}
    server.fail_body = {"message": f"rate limited, token {TOKEN}"}
    r = pb(env, "--pr", "7", "--body", str(f), "--api-url", server.api_url)
    assert r.returncode == 5
    assert "rate limit" in r.stderr and TOKEN not in r.stdout + r.stderr


def test_cli_dry_run_and_missing_token(server, env, tmp_path):
    f = tmp_path / "report.md"
    f.write_text("the report")
    del env["GITHUB_TOKEN"]
    r = pb(env, "--pr", "7", "--body", str(f), "--api-url", server.api_url)
    assert r.returncode == 2 and "GITHUB_TOKEN is not set" in r.stderr and "--dry-run" in r.stderr
    assert server.requests == []

    env["GITHUB_TOKEN"] = TOKEN  # a dry run shows the header it would send, redacted
    r = pb(env, "--pr", "7", "--body", str(f), "--api-url", server.api_url, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert server.requests == []
    assert "dry-run" in r.stdout and "the report" in r.stdout and MARKER in r.stdout
    assert "Authorization: Bearer ***" in r.stdout and TOKEN not in r.stdout + r.stderr


# -- finding the PR by its head commit (`perfbench bot pr-number`) ------------------------------

SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER = "89abcdef0123456789abcdef0123456789abcdef"


def gets(server):
    return [r["path"] for r in server.requests if r["method"] == "GET"]


def test_pr_number_by_head_branch(server):
    server.add_pull(4, OTHER, branch="other")
    server.add_pull(5, SHA, branch="feature")
    assert client(server).pr_number_for_sha(SHA, head_branch="feature") == 5
    assert gets(server) == [f"/api/v3/repos/{REPO}/pulls?state=open&head=octo-org%3Afeature&per_page=100"]


def test_pr_number_by_commit_without_branch(server):
    server.add_pull(4, OTHER, branch="other")
    server.add_pull(5, SHA, branch="feature")
    assert client(server).pr_number_for_sha(SHA.upper()) == 5  # any case in, GitHub's lower case matched
    assert gets(server) == [f"/api/v3/repos/{REPO}/commits/{SHA}/pulls?per_page=100"]


def test_pr_number_from_a_fork(server):
    server.add_pull(8, SHA, owner="forker", branch="main")  # a fork's branch may share our branch's name
    server.add_pull(2, OTHER, branch="main")
    assert client(server).pr_number_for_sha(SHA, head_branch="main", head_owner="forker") == 8
    assert gets(server)[0].endswith("head=forker%3Amain&per_page=100") and len(gets(server)) == 1
    # the owner left out: octo-org:main is PR #2 with another head, so it falls back to the commit
    server.requests.clear()
    assert client(server).pr_number_for_sha(SHA, head_branch="main") == 8
    assert len(gets(server)) == 2 and f"/commits/{SHA}/pulls" in gets(server)[1]


def test_pr_number_not_found(server):
    server.add_pull(4, OTHER)
    with pytest.raises(NoSinglePullRequest) as ei:
        client(server).pr_number_for_sha(SHA, head_branch="feature")
    assert ei.value.exit_code == 1 and ei.value.numbers == []
    assert f"no open pull request has head SHA {SHA} in {REPO}" in str(ei.value)
    assert "octo-org:feature" in str(ei.value)


def test_pr_number_ignores_other_heads_and_closed(server):
    server.add_pull(5, OTHER, commits=[SHA, OTHER])  # contains SHA, but pushed to since: its head moved on
    server.add_pull(6, SHA, state="closed")  # the right head, but closed
    server.add_pull(7, SHA, state="open", branch="feature")
    server.pulls[-1]["head"]["sha"] = OTHER  # listed under the branch, but another head
    c = client(server)
    with pytest.raises(NoSinglePullRequest, match="no open pull request"):
        c.pr_number_for_sha(SHA)
    with pytest.raises(NoSinglePullRequest, match="no open pull request"):
        c.pr_number_for_sha(SHA, head_branch="feature")
    assert c.open_pulls_with_head(SHA) == []


def test_pr_number_two_candidates_refused(server):
    server.add_pull(9, SHA, branch="b")
    server.add_pull(3, SHA, branch="a")
    with pytest.raises(NoSinglePullRequest) as ei:
        client(server).pr_number_for_sha(SHA)
    assert ei.value.numbers == [3, 9] and ei.value.exit_code == 1
    assert "#3, #9" in str(ei.value) and "refusing" in str(ei.value)


def test_pr_number_pagination(server):
    server.per_page_cap = 2  # 5 PRs associated with the commit -> 3 pages; the open one is last
    for n in range(10, 14):
        server.add_pull(n, OTHER, state="closed", commits=[SHA])
    server.add_pull(20, SHA)
    assert client(server).pr_number_for_sha(SHA) == 20
    paths = gets(server)
    assert len(paths) == 3 and paths[1].endswith("page=2") and paths[2].endswith("page=3")
    # the same on the branch listing, whose query must survive into the next page's URL
    server.requests.clear()
    server.pulls = []
    for n in range(30, 34):
        server.add_pull(n, OTHER, branch="feature")
    server.add_pull(40, SHA, branch="feature")
    assert client(server).pr_number_for_sha(SHA, head_branch="feature") == 40
    paths = gets(server)
    assert len(paths) == 3 and all("head=octo-org%3Afeature" in p for p in paths)


def test_pr_number_404_403_5xx(server):
    with pytest.raises(GitHubError) as ei:
        GitHubClient("octo-org/missing", token=TOKEN, api_url=server.api_url).pr_number_for_sha(SHA)
    assert ei.value.status == 404 and ei.value.exit_code == 5
    assert "not found (404)" in str(ei.value) and "octo-org/missing" in str(ei.value) and SHA in str(ei.value)

    server.fail[("GET", "pulls")] = [403]
    server.fail_body = {"message": "Resource not accessible by integration"}
    with pytest.raises(GitHubError) as ei:
        client(server).pr_number_for_sha(SHA, head_branch="feature")
    msg = str(ei.value)
    assert ei.value.status == 403 and "refused the token (403)" in msg and "pull-requests: read" in msg
    assert "Resource not accessible by integration" in msg and TOKEN not in msg

    server.add_pull(5, SHA)
    server.fail[("GET", "pulls")] = [502]  # retried like any GET
    assert client(server).pr_number_for_sha(SHA) == 5


@pytest.mark.parametrize("sha", ["", "0123", SHA + "0", SHA[:-1] + "g", " " * 40])
def test_pr_number_bad_sha(server, sha):
    with pytest.raises(UsageError, match="40 hex digits"):
        client(server).pr_number_for_sha(sha)
    assert server.requests == []


def test_pr_number_bad_branch_or_owner(server):
    c = client(server)
    with pytest.raises(UsageError, match="needs --head-branch"):
        c.pr_number_for_sha(SHA, head_owner="forker")
    with pytest.raises(UsageError, match="not a branch name"):
        c.pr_number_for_sha(SHA, head_branch="a b")
    with pytest.raises(UsageError, match="not a GitHub user"):
        c.pr_number_for_sha(SHA, head_branch="x", head_owner="a/b")
    assert server.requests == []


def pbn(env, *args):
    return subprocess.run(perfbench_cmd() + ["bot", "pr-number", "--repo", REPO] + list(args), env=env,
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_cli_pr_number(server, env):
    server.add_pull(5, SHA, owner="forker", branch="fix")
    r = pbn(env, "--sha", SHA, "--head-branch", "fix", "--head-owner", "forker", "--api-url", server.api_url)
    assert (r.returncode, r.stdout) == (0, "5\n"), r.stderr
    env["GITHUB_API_URL"] = server.api_url
    r = pbn(env, "--sha", SHA)
    assert (r.returncode, r.stdout) == (0, "5\n"), r.stderr

    r = pbn(env, "--sha", OTHER)
    assert r.returncode == 1 and r.stdout == ""
    assert f"no open pull request has head SHA {OTHER}" in r.stderr

    server.add_pull(6, SHA, branch="other")
    r = pbn(env, "--sha", SHA)
    assert r.returncode == 1 and r.stdout == "" and "#5, #6" in r.stderr

    r = pbn(env, "--sha", "abc")
    assert r.returncode == 2 and "40 hex digits" in r.stderr
    assert all(TOKEN not in x for x in (r.stdout, r.stderr))
    assert all(rq["headers"].get("Authorization") == f"Bearer {TOKEN}" for rq in server.requests)


def test_cli_pr_number_errors_never_print_the_token(server, env):
    server.fail[("GET", "pulls")] = [403]
    server.fail_body = {"message": f"no, and here is your token back: {TOKEN}"}
    r = pbn(env, "--sha", SHA, "--api-url", server.api_url)
    assert r.returncode == 5 and "refused the token (403)" in r.stderr
    assert TOKEN not in r.stdout + r.stderr and "***" in r.stderr

    r = pbn(env, "--sha", SHA, "--api-url", server.api_url + "/nowhere")
    assert r.returncode == 5 and "not found (404)" in r.stderr and TOKEN not in r.stdout + r.stderr


def test_cli_pr_number_dry_run_and_missing_token(server, env):
    del env["GITHUB_TOKEN"]
    r = pbn(env, "--sha", SHA, "--api-url", server.api_url)
    assert r.returncode == 2 and "GITHUB_TOKEN is not set" in r.stderr
    env["GITHUB_TOKEN"] = TOKEN
    r = pbn(env, "--sha", SHA, "--head-branch", "fix", "--api-url", server.api_url, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert server.requests == []
    assert f"GET {server.api_url}/repos/{REPO}/pulls?state=open&head=octo-org%3Afix&per_page=100" in r.stdout
    assert f"/commits/{SHA}/pulls" in r.stdout
    assert "Authorization: Bearer ***" in r.stdout and TOKEN not in r.stdout + r.stderr
