"""The GitHub client: the one module that talks to GitHub (PR comments, finding a PR by its head
commit, ticket issues).

* `repo` is OWNER/NAME; the token comes from an argument or `GITHUB_TOKEN` and is never printed,
  logged, put in an exception or a repr (anything that could carry it is redacted to `***`).
* The API root is `--api-url`, else `GITHUB_API_URL`, else https://api.github.com (GitHub
  Enterprise: https://HOST/api/v3). Tests point it at a local server.
* `dry_run=True` sends nothing and needs no token: every request it would send is logged instead.
* Errors are `GitHubError` (a `RemoteError`, exit code 5 by CONTRACTS §6) with a message that
  says what to do; bad input is `UsageError` (exit code 2). Server errors (5xx) are retried
  twice with a short backoff; a create (POST) is only retried after checking that the first
  attempt did not land.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from perfbench.errors import PerfbenchError, RemoteError, UsageError

DEFAULT_API_URL = "https://api.github.com"
API_VERSION = "2022-11-28"
MARKER = "<!-- perfbench-bot -->"
BODY_LIMIT = 65536  # GitHub's limit on a comment body, in characters
PER_PAGE = 100
MAX_PAGES = 1000  # a guard against a Link header that never ends
RETRIES = 2  # extra attempts after a 5xx
RETRY_DELAY_S = 0.2  # first backoff; doubled each retry
TRUNCATION_NOTE = ("\n\n---\n**Truncated by perfbench**: the full comment was {n} characters, "
                   "over GitHub's limit of {limit}.")
SHA_RE = re.compile(r"^[0-9a-fA-F]{40}$")
BRANCH_RE = re.compile(r"^[^\x00-\x20\x7f~^:?*\[\\]+$")  # git's forbidden ref characters, roughly
REPO_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
_LINK_RE = re.compile(r'<([^>]*)>\s*;\s*rel="?([^";]+)"?')


class GitHubError(RemoteError):
    """GitHub answered with an error (`status` is its HTTP status) or could not be reached
    (`status` is None). The message never contains the token."""

    def __init__(self, status: int | None, message: str):
        self.status = status
        self.message = message
        super().__init__(message)

    @property
    def retryable(self) -> bool:
        return self.status is not None and 500 <= self.status < 600


class NoSinglePullRequest(PerfbenchError):
    """No open pull request, or more than one, has the head commit asked for. GitHub answered
    fine, so this is not a remote failure: exit code 1 (a "not found" verdict, CONTRACTS §6).
    `numbers` lists the candidates (empty when none)."""

    exit_code = 1

    def __init__(self, message: str, numbers: list[int]):
        self.numbers = numbers
        super().__init__(message)


def resolve_api_url(api_url: str | None = None) -> str:
    """--api-url, else GITHUB_API_URL, else https://api.github.com; no trailing slash."""
    url = (api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL).strip().rstrip("/")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"GitHub API URL {url!r} is not an http(s) URL "
                         f"(example: {DEFAULT_API_URL}, or https://HOST/api/v3 for GitHub Enterprise)")
    return url


def check_repo(repo: str) -> tuple[str, str]:
    """OWNER/NAME -> (owner, name), or a UsageError that shows the expected form."""
    repo = (repo or "").strip()
    if not REPO_RE.match(repo) or repo.split("/")[1] in (".", ".."):
        raise UsageError(f"--repo {repo!r} is not OWNER/NAME (example: --repo octo-org/perfbench)")
    owner, name = repo.split("/")
    return owner, name


def check_sha(sha: str) -> str:
    """A full commit SHA (40 hex digits) -> lower case, or a UsageError."""
    sha = (sha or "").strip()
    if not SHA_RE.match(sha):
        raise UsageError(f"--sha {sha!r} is not a full commit SHA (40 hex digits, e.g. the output of "
                         "`git rev-parse HEAD`)")
    return sha.lower()


def with_marker(body: str, marker: str = MARKER, limit: int = BODY_LIMIT) -> str:
    """The body as posted: the hidden marker at the end (added if missing), and, when the result
    would exceed GitHub's limit, the body cut short with a visible note (the marker is kept)."""
    if not marker or not marker.strip():
        raise UsageError("the comment marker must not be empty (default: %s)" % MARKER)
    body = body.rstrip()
    if body.endswith(marker):
        body = body[: -len(marker)].rstrip()
    full = body + "\n\n" + marker
    if len(full) <= limit:
        return full
    body = body.replace(marker, "")  # the one marker we keep goes at the end
    note = TRUNCATION_NOTE.format(n=len(full), limit=limit)
    keep = limit - len(note) - len("\n\n" + marker)
    if keep < 0:
        raise UsageError(f"the marker is too long ({len(marker)} characters)")
    return body[:keep].rstrip() + note + "\n\n" + marker


class _SameHostRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects (a renamed repo) only on the same host, so the token never leaves it."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        old, new = urllib.parse.urlsplit(req.full_url), urllib.parse.urlsplit(newurl)
        if (old.scheme, old.netloc) != (new.scheme, new.netloc):
            return None  # urllib raises the 3xx as an HTTPError
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class GitHubClient:
    """GitHub's REST API for one repository. `log` receives one line per notable event (each
    request in a dry run, each retry); it never sees the token."""

    def __init__(self, repo: str, token: str | None = None, api_url: str | None = None, timeout: float = 30,
                 dry_run: bool = False, log: Callable[[str], None] | None = None,
                 retries: int = RETRIES, retry_delay: float = RETRY_DELAY_S):
        self.owner, self.name = check_repo(repo)
        self.repo = f"{self.owner}/{self.name}"
        self.api_url = resolve_api_url(api_url)
        self.timeout = timeout
        self.dry_run = dry_run
        self.log = log or (lambda line: None)
        self.retries = retries
        self.retry_delay = retry_delay
        token = token if token is not None else os.environ.get("GITHUB_TOKEN", "")
        self._token = (token or "").strip()
        if not self._token and not dry_run:
            raise UsageError("GITHUB_TOKEN is not set: export a token that has `issues: write` / "
                             f"`pull-requests: write` on {self.repo}, or use --dry-run to see what would be sent")
        self._opener = urllib.request.build_opener(_SameHostRedirects)

    def __repr__(self) -> str:
        return (f"GitHubClient(repo={self.repo!r}, api_url={self.api_url!r}, "
                f"token={'***' if self._token else None}, dry_run={self.dry_run})")

    # -- plumbing -------------------------------------------------------------------------------

    def _redact(self, text: str) -> str:
        text = str(text)
        return text.replace(self._token, "***") if self._token else text

    def _url(self, path: str, **query) -> str:
        url = self.api_url + path
        return url + ("?" + urllib.parse.urlencode(query) if query else "")

    def _headers(self, redact: bool = False) -> dict:
        h = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION,
             "User-Agent": "perfbench"}
        if self._token:
            h["Authorization"] = "Bearer " + ("***" if redact else self._token)
        return h

    def _error(self, status: int | None, method: str, url: str, headers, payload, what: str) -> GitHubError:
        gh_msg = ""
        if isinstance(payload, dict):
            gh_msg = str(payload.get("message") or "")
            errs = payload.get("errors")
            if errs:
                details = [e.get("message") or e.get("code") or json.dumps(e) if isinstance(e, dict) else str(e)
                           for e in errs]
                gh_msg = (gh_msg + ": " if gh_msg else "") + "; ".join(str(d) for d in details)
        elif isinstance(payload, str):
            gh_msg = payload.strip()[:300]
        said = f" (GitHub said: {gh_msg})" if gh_msg else ""
        hdr = headers or {}
        if method == "GET":
            perms = f"check GITHUB_TOKEN can read {self.repo} (`pull-requests: read`, `issues: read`)"
        else:
            perms = f"check GITHUB_TOKEN has `issues: write` / `pull-requests: write` for {self.repo}"
        if status in (403, 429) and (hdr.get("X-RateLimit-Remaining") == "0" or hdr.get("Retry-After")
                                     or "rate limit" in gh_msg.lower()):
            reset = hdr.get("X-RateLimit-Reset")
            when = ""
            if reset and reset.isdigit():
                when = " until " + time.strftime("%H:%M:%S UTC", time.gmtime(int(reset)))
            elif hdr.get("Retry-After"):
                when = f" for {hdr.get('Retry-After')} s"
            msg = (f"GitHub rate limit exceeded ({status}, X-RateLimit-Remaining: "
                   f"{hdr.get('X-RateLimit-Remaining', '?')}): wait{when} and retry{said}")
        elif status == 401:
            msg = f"GitHub refused the token (401, bad or expired credentials): {perms}{said}"
        elif status == 403:
            msg = f"GitHub refused the token (403): {perms}{said}"
        elif status == 404:
            msg = f"not found (404): {what} does not exist or the token cannot see it{said}"
        elif status == 422:
            msg = f"GitHub rejected the request (422): {gh_msg or 'validation failed'}"
        elif status is not None and 500 <= status < 600:
            msg = (f"GitHub server error {status} on {method} {url} after {self.retries + 1} attempts; "
                   f"GitHub may be degraded (https://www.githubstatus.com), try again later{said}")
        elif status is not None and 300 <= status < 400:
            msg = (f"GitHub redirected {method} {url} ({status}) to another host "
                   f"({hdr.get('Location', '?')}); not following it with the token")
        else:
            msg = f"GitHub answered {status} to {method} {url}{said}"
        return GitHubError(status, self._redact(msg))

    def _request_once(self, method: str, url: str, data=None, what: str = ""):
        body = None if data is None else json.dumps(data).encode()
        headers = self._headers()
        if body is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                raw = resp.read()
                payload = json.loads(raw) if raw.strip() else None
                return payload, resp.headers
        except urllib.error.HTTPError as e:
            try:
                raw = e.read()
            except OSError:
                raw = b""
            try:
                payload = json.loads(raw) if raw.strip() else None
            except ValueError:
                payload = raw.decode("utf-8", "replace")
            raise self._error(e.code, method, url, e.headers, payload, what) from None
        except urllib.error.URLError as e:
            raise GitHubError(None, self._redact(f"cannot reach GitHub at {url}: {e.reason} "
                                                 "(check the network, --api-url / GITHUB_API_URL)")) from None
        except TimeoutError:
            raise GitHubError(None, self._redact(f"GitHub did not answer {method} {url} within "
                                                 f"{self.timeout:g} s")) from None
        except ValueError:
            raise GitHubError(None, self._redact(f"GitHub's answer to {method} {url} is not JSON")) from None

    def _request(self, method: str, url: str, data=None, what: str = "", retry: bool = True):
        """One request; 5xx retried `self.retries` times when `retry` (idempotent requests)."""
        attempt = 0
        while True:
            try:
                return self._request_once(method, url, data, what)
            except GitHubError as e:
                if not (retry and e.retryable and attempt < self.retries):
                    raise
                attempt = self._backoff(attempt, f"GitHub answered {e.status} to {method} {url}; retrying")

    def _backoff(self, attempt: int, what: str) -> int:
        """Log `what` and sleep before retry number attempt+1 (exponential delay); returns it."""
        delay = self.retry_delay * (2 ** attempt)
        attempt += 1
        self.log(f"{what} in {delay:g} s ({attempt}/{self.retries})")
        time.sleep(delay)
        return attempt

    def _describe(self, method: str, url: str, body: str | None = None) -> None:
        """Dry run: log the request instead of sending it."""
        self.log(f"dry-run: would send {method} {url}")
        for k, v in self._headers(redact=True).items():
            self.log(f"  {k}: {v}")
        if body is not None:
            preview = body if len(body) <= 600 else body[:600] + f"\n  … ({len(body)} characters in all)"
            self.log("  body:\n" + "\n".join("    " + line for line in self._redact(preview).splitlines()))

    # -- the API --------------------------------------------------------------------------------

    def _check_number(self, n, what: str) -> int:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise UsageError(f"{what} must be a positive integer, not {n!r}")
        return n

    def _get_pages(self, url: str, what: str, items: str) -> list:
        """GET `url` and every page after it (the Link header's rel="next", same host only);
        each page must be a JSON list. `items` names them in messages ("comments")."""
        base = urllib.parse.urlsplit(self.api_url)
        out: list = []
        for _ in range(MAX_PAGES):
            payload, headers = self._request("GET", url, what=what)
            if not isinstance(payload, list):
                raise GitHubError(None, f"GitHub's answer to GET {url} is not a list of {items}")
            out += payload
            nxt = {rel: u for u, rel in _LINK_RE.findall(headers.get("Link") or "")}.get("next")
            if not nxt:
                return out
            nxt = urllib.parse.urljoin(url, nxt)
            if urllib.parse.urlsplit(nxt)[:2] != base[:2]:
                raise GitHubError(None, f"GitHub's next page {nxt} is on another host; not sending the token there")
            url = nxt
        raise GitHubError(None, f"more than {MAX_PAGES} pages of {items} ({what}); giving up")

    def list_issue_comments(self, pr: int) -> list[dict]:
        """Every comment on an issue or PR, oldest first, following the Link header's rel="next"."""
        pr = self._check_number(pr, "the PR number")
        url = self._url(f"/repos/{self.owner}/{self.name}/issues/{pr}/comments", per_page=PER_PAGE)
        if self.dry_run:
            self._describe("GET", url)
            return []
        return self._get_pages(url, f"repo {self.repo} or PR #{pr}", "comments")

    def open_pulls_with_head(self, sha: str, head_branch: str | None = None,
                             head_owner: str | None = None) -> list[dict]:
        """The OPEN pull requests of this repository whose head commit is exactly `sha`, lowest
        number first. With `head_branch` (and `head_owner`, default this repository's owner; a
        fork's owner for a PR from a fork) it lists `GET /pulls?state=open&head=OWNER:BRANCH`;
        when that finds none, or without a branch, it asks `GET /commits/{sha}/pulls` (the PRs
        GitHub associates with the commit). Either way only PRs whose `head.sha` equals `sha` are
        kept: a PR pushed to since (or one that merely contains the commit) is not this one."""
        sha = check_sha(sha)
        if head_owner is not None and not head_branch:
            raise UsageError("--head-owner needs --head-branch (GitHub filters PRs by OWNER:BRANCH)")
        if head_branch is not None and not BRANCH_RE.match(head_branch):
            raise UsageError(f"--head-branch {head_branch!r} is not a branch name")
        owner = head_owner if head_owner is not None else self.owner
        if not REPO_RE.match(f"{owner}/x"):
            raise UsageError(f"--head-owner {owner!r} is not a GitHub user or organization name")
        urls = []
        if head_branch:
            urls.append((self._url(f"/repos/{self.owner}/{self.name}/pulls", state="open",
                                   head=f"{owner}:{head_branch}", per_page=PER_PAGE), f"repo {self.repo}"))
        urls.append((self._url(f"/repos/{self.owner}/{self.name}/commits/{sha}/pulls", per_page=PER_PAGE),
                     f"repo {self.repo} or commit {sha}"))
        if self.dry_run:
            for i, (url, _) in enumerate(urls):
                if i:
                    self.log("dry-run: and, when that finds no open PR with this head commit:")
                self._describe("GET", url)
            return []
        for url, what in urls:
            found = {}
            for p in self._get_pages(url, what, "pull requests"):
                if not isinstance(p, dict):
                    raise GitHubError(None, f"GitHub's answer to GET {url} is not a list of pull requests")
                head = p.get("head") if isinstance(p.get("head"), dict) else {}
                number = p.get("number")
                if (p.get("state") == "open" and str(head.get("sha") or "").lower() == sha
                        and isinstance(number, int) and not isinstance(number, bool)):
                    found[number] = p
            if found:
                return [found[n] for n in sorted(found)]
        return []

    def pr_number_for_sha(self, sha: str, head_branch: str | None = None, head_owner: str | None = None) -> int:
        """The number of the one open PR whose head commit is `sha` (see open_pulls_with_head).
        None, or several, is a NoSinglePullRequest (exit code 1) that says which."""
        sha = check_sha(sha)
        pulls = self.open_pulls_with_head(sha, head_branch, head_owner)
        numbers = [int(p["number"]) for p in pulls]
        where = f" (head branch {head_owner or self.owner}:{head_branch})" if head_branch else ""
        if not numbers:
            raise NoSinglePullRequest(
                f"no open pull request has head SHA {sha} in {self.repo}{where}: the PR was closed or "
                "pushed to since (a run on the new head reports there), or this commit was never a PR's head", [])
        if len(numbers) > 1:
            listed = ", ".join(f"#{n}" for n in numbers)
            raise NoSinglePullRequest(
                f"several open pull requests have head SHA {sha} in {self.repo}: {listed}; "
                "refusing to guess which one is meant", numbers)
        return numbers[0]

    def create_issue_comment(self, pr: int, body: str, retry: bool = False) -> dict:
        """POST a new comment. Not retried by default: a 5xx may still have created it."""
        pr = self._check_number(pr, "the PR number")
        url = self._url(f"/repos/{self.owner}/{self.name}/issues/{pr}/comments")
        if self.dry_run:
            self._describe("POST", url, body)
            return {}
        payload, _ = self._request("POST", url, {"body": body}, what=f"repo {self.repo} or PR #{pr}", retry=retry)
        return payload or {}

    def update_issue_comment(self, comment_id: int, body: str) -> dict:
        """PATCH an existing comment's body (idempotent, so 5xx are retried)."""
        comment_id = self._check_number(comment_id, "the comment id")
        url = self._url(f"/repos/{self.owner}/{self.name}/issues/comments/{comment_id}")
        if self.dry_run:
            self._describe("PATCH", url, body)
            return {}
        payload, _ = self._request("PATCH", url, {"body": body}, what=f"comment {comment_id} in repo {self.repo}")
        return payload or {}

    def find_marked_comment(self, pr: int, marker: str = MARKER, author: str | None = None) -> dict | None:
        """The newest comment on the PR whose body contains `marker`, or None. With `author`, only
        that login's comments count (anyone can paste the marker into a comment of their own)."""
        marked = [c for c in self.list_issue_comments(pr) if marker in (c.get("body") or "")
                  and (author is None or (c.get("user") or {}).get("login") == author)]
        if not marked:
            return None
        return max(marked, key=lambda c: (str(c.get("created_at") or ""), int(c.get("id") or 0)))

    def upsert_pr_comment(self, pr: int, body: str, marker: str = MARKER,
                          author: str | None = None) -> tuple[str, str | None]:
        """Post `body` on the PR, or update the comment posted before (found by `marker`) instead of
        adding another. Returns ("created"|"updated"|"dry-run", the comment's URL or None)."""
        pr = self._check_number(pr, "the PR number")
        if not body or not body.strip():
            raise UsageError("the comment body is empty")
        text = with_marker(body, marker)
        if self.dry_run:
            self.log(f"dry-run: nothing is sent. A real run lists PR #{pr}'s comments, updates the newest one "
                     f"containing {marker!r}, or else creates one:")
            self.list_issue_comments(pr)
            self._describe(f"PATCH {self._url(f'/repos/{self.owner}/{self.name}/issues/comments/')}ID if found, "
                           "else POST", self._url(f"/repos/{self.owner}/{self.name}/issues/{pr}/comments"), text)
            return "dry-run", None
        existing = self.find_marked_comment(pr, marker, author)
        if existing is not None:
            c = self.update_issue_comment(int(existing["id"]), text)
            return "updated", c.get("html_url") or existing.get("html_url")
        attempt = 0
        while True:
            try:
                c = self.create_issue_comment(pr, text)
                return "created", c.get("html_url")
            except GitHubError as e:
                if not (e.retryable and attempt < self.retries):
                    raise
            attempt = self._backoff(attempt, f"GitHub answered 5xx to POST on PR #{pr}; checking whether it "
                                             "landed, then retrying")
            landed = self.find_marked_comment(pr, marker, author)
            if landed is not None:  # the failed POST did create it: make sure it has this body
                if landed.get("body") != text:
                    landed = self.update_issue_comment(int(landed["id"]), text) or landed
                return "created", landed.get("html_url")

    # -- issues (perfbench tickets sync) ---------------------------------------------------------

    def authenticated_login(self) -> str:
        """The login of the account the token acts as (GET /user). A personal token can read it; an
        Actions GITHUB_TOKEN or an app's installation token cannot (GitHub answers 403)."""
        url = self._url("/user")
        if self.dry_run:
            raise UsageError("a dry run sends nothing, so it cannot ask GitHub who the token is")
        payload, _ = self._request("GET", url, what="the token's account (GET /user)")
        login = payload.get("login") if isinstance(payload, dict) else None
        if not isinstance(login, str) or not login.strip():
            raise GitHubError(None, f"GitHub's answer to GET {url} names no login")
        return login.strip()

    def list_issues(self, label: str) -> list[dict]:
        """Every issue (open and closed, not pull requests) carrying `label`, following pages."""
        if not label or not label.strip() or "," in label:
            raise UsageError(f"--label {label!r} must be one non-empty label name without commas")
        url = self._url(f"/repos/{self.owner}/{self.name}/issues", state="all", labels=label, per_page=PER_PAGE)
        if self.dry_run:
            self._describe("GET", url)
            return []
        items = self._get_pages(url, f"repo {self.repo}", "issues")
        if not all(isinstance(i, dict) for i in items):
            raise GitHubError(None, f"GitHub's answer to GET {url} is not a list of issues")
        return [i for i in items if "pull_request" not in i]

    def get_issue(self, number: int) -> dict | None:
        """One issue by number, or None when it does not exist (404) or is a pull request."""
        number = self._check_number(number, "the issue number")
        url = self._url(f"/repos/{self.owner}/{self.name}/issues/{number}")
        if self.dry_run:
            self._describe("GET", url)
            return None
        try:
            payload, _ = self._request("GET", url, what=f"issue #{number} in repo {self.repo}")
        except GitHubError as e:
            if e.status == 404:
                return None
            raise
        if not isinstance(payload, dict) or "pull_request" in payload:
            return None
        return payload

    def create_issue(self, title: str, body: str, labels: list[str]) -> dict:
        """POST a new issue. Not retried: a 5xx may still have created it (the caller re-lists)."""
        url = self._url(f"/repos/{self.owner}/{self.name}/issues")
        data = {"title": title, "body": body, "labels": list(labels)}
        if self.dry_run:
            self._describe("POST", url, f"title: {title}\nlabels: {', '.join(labels)}\n\n{body}")
            return {}
        payload, _ = self._request("POST", url, data, what=f"repo {self.repo}", retry=False)
        return payload or {}

    def update_issue(self, number: int, **fields) -> dict:
        """PATCH an issue's title / body / state / state_reason (idempotent, so 5xx are retried)."""
        number = self._check_number(number, "the issue number")
        url = self._url(f"/repos/{self.owner}/{self.name}/issues/{number}")
        if self.dry_run:
            self._describe("PATCH", url, "\n".join(f"{k}: {v}" for k, v in fields.items()))
            return {}
        payload, _ = self._request("PATCH", url, fields, what=f"issue #{number} in repo {self.repo}")
        return payload or {}
