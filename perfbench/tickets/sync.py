"""`perfbench tickets sync`: the database's tickets as GitHub issues, through the one GitHub client.

Each ticket's issue carries a hidden marker with the ticket's uid and the label (default
`perfbench`). A sync lists the label's issues (open and closed), then per ticket, by priority:

* an open ticket without an issue: create one (at most `max_new` per sync; the rest wait);
* a ticket with an issue whose title, body or state differ: PATCH it (closed tickets close their
  issue, reopened ones reopen it);
* otherwise nothing: a second sync sends no writes.

Only issues opened by the account the sync writes as are ever edited, closed or reopened: anyone
can open an issue with the label and paste a ticket's marker into it, and such an issue is ignored
(logged; the ticket gets an issue of its own). That account is `author` if given, else the
environment's `PERFBENCH_BOT_AUTHOR` (as for `perfbench bot comment`), else what GitHub says the
token is (GET /user). An Actions GITHUB_TOKEN or an app's installation token cannot read /user:
with one of those, set PERFBENCH_BOT_AUTHOR (`github-actions[bot]` for GITHUB_TOKEN, `NAME[bot]`
for an app); the sync refuses to guess (exit 5) rather than edit someone else's issue or create
duplicates of its own.

An issue recorded for a ticket but missing from the listing (its label was removed) is fetched by
number, so it is updated, not duplicated. A dry run sends nothing at all, so it cannot see the
issues: it says what it would create, and which recorded issues it would check. When tickets of
several host classes are synced to one repository, titles end with the host class.

Coverage tickets (ORT has no kernel) are not synced: they are not a kernel to fix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from sqlalchemy import select

from perfbench.github import GitHubClient, GitHubError, with_marker
from perfbench.store import models as m
from perfbench.tickets import lifecycle, render

SYNCED_KINDS = ("wrong-answer", "broken", "loss")


def marker(uid: str) -> str:
    return f"<!-- perfbench-ticket {uid} -->"


def issue_body(t: m.Ticket, host_class: str) -> str:
    """The issue's body: the ticket's markdown and the hidden marker, within GitHub's size limit."""
    return with_marker(render.body(t, host_class, render.events_of(t)), marker(t.uid))


TITLE_LIMIT = 256  # GitHub's limit on an issue title


def issue_title(t: m.Ticket, with_host_class: bool) -> str:
    suffix = f" [{t.host_class.key}]" if with_host_class else ""
    title = t.title
    if len(title) + len(suffix) > TITLE_LIMIT:
        title = title[: TITLE_LIMIT - len(suffix) - 1] + "…"
    return title + suffix


@dataclass
class SyncResult:
    created: list = field(default_factory=list)  # (ticket id, issue number)
    updated: list = field(default_factory=list)
    closed: list = field(default_factory=list)
    reopened: list = field(default_factory=list)
    unchanged: list = field(default_factory=list)
    waiting: list = field(default_factory=list)  # open tickets over --max-new
    unseen: list = field(default_factory=list)  # dry run: recorded issues it would check
    ignored: list = field(default_factory=list)  # (ticket id, issue number, login): a marker in someone else's issue

    def as_dict(self) -> dict:
        return {k: list(v) for k, v in self.__dict__.items()}


def _norm(text) -> str:
    return (text or "").replace("\r\n", "\n").strip()


AUTHOR_ENV = "PERFBENCH_BOT_AUTHOR"


def sync_author(client: GitHubClient, author: str | None = None) -> str:
    """The login whose issues the sync may edit: `author`, else $PERFBENCH_BOT_AUTHOR, else GET /user."""
    author = (author or os.environ.get(AUTHOR_ENV) or "").strip()
    if author:
        return author
    try:
        return client.authenticated_login()
    except GitHubError as e:
        if e.status not in (403, 404):
            raise
        raise GitHubError(e.status, f"cannot tell which GitHub account the token writes issues as ({e.message}); "
                                    f"set {AUTHOR_ENV} to its login (github-actions[bot] for an Actions "
                                    "GITHUB_TOKEN, NAME[bot] for an app's token): only issues that account "
                                    "opened are edited or closed") from None


def _login(issue: dict) -> str:
    user = issue.get("user")
    login = user.get("login") if isinstance(user, dict) else None
    return login if isinstance(login, str) else ""


def sync(s, client: GitHubClient, label: str = "perfbench", max_new: int = 10,
         host_class: str | None = None, author: str | None = None) -> SyncResult:
    everything = s.scalars(select(m.Ticket).where(m.Ticket.kind.in_(SYNCED_KINDS))).all()
    # several host classes in the database: every title names its host class (whatever --host-class
    # selects now, so alternating syncs do not rewrite titles)
    several = len({t.host_class_id for t in everything}) > 1
    tickets = sorted((t for t in everything if not host_class or t.host_class.key == host_class),
                     key=lifecycle.sort_key)
    res = SyncResult()
    # a dry run lists nothing, so there is nothing to check and no reason to ask GitHub who we are
    ours = None if client.dry_run or not tickets else sync_author(client, author)

    alien = set()  # numbers of issues found carrying a marker that someone else opened

    def foreign(t, issue) -> bool:
        """True (and noted) when the issue carrying t's marker was opened by someone else."""
        if ours is None or _login(issue).casefold() == ours.casefold():  # logins ignore case
            return False
        alien.add(issue.get("number"))
        res.ignored.append((t.id, issue.get("number"), _login(issue)))
        client.log(f"issue #{issue.get('number')} carries ticket {t.id}'s marker but was opened by "
                   f"{_login(issue) or 'an unknown account'}, not {ours}: left alone")
        return True

    existing = {}
    for issue in client.list_issues(label):
        body = issue.get("body") or ""
        for t in tickets:
            if marker(t.uid) in body and isinstance(issue.get("number"), int) and not foreign(t, issue):
                existing.setdefault(t.uid, issue)
    for t in tickets:
        want_state = "open" if t.state == "open" else "closed"
        title = issue_title(t, several)
        body = issue_body(t, t.host_class.key)
        recorded = (t.github or {}).get(client.repo)
        issue = existing.get(t.uid)
        if issue is None and recorded and recorded not in alien:  # (a listed foreign one is not fetched again)
            if client.dry_run:
                res.unseen.append((t.id, recorded))
                continue
            issue = client.get_issue(recorded)  # not listed: its label was removed, or it moved
            if issue is not None and (marker(t.uid) not in (issue.get("body") or "") or foreign(t, issue)):
                issue = None  # that number is not (any more) this ticket's issue, or not ours
        if issue is None:
            if want_state != "open":
                continue
            if len(res.created) >= max_new:
                res.waiting.append(t.id)
                continue
            made = client.create_issue(title, body, [label])
            number = made.get("number")
            if number is None and not client.dry_run:
                raise GitHubError(None, f"GitHub created an issue for ticket {t.id} but did not say its number")
            if number is not None:
                t.github = {**(t.github or {}), client.repo: int(number)}
            res.created.append((t.id, number))
            continue
        number = int(issue["number"])
        if recorded != number:
            t.github = {**(t.github or {}), client.repo: number}
        fields = {}
        if _norm(issue.get("title")) != _norm(title):
            fields["title"] = title
        if _norm(issue.get("body")) != _norm(body):
            fields["body"] = body
        if issue.get("state") != want_state:
            fields["state"] = want_state
            if want_state == "closed":
                fields["state_reason"] = "completed" if t.closed_reason == "fixed" else "not_planned"
        if not fields:
            res.unchanged.append((t.id, number))
            continue
        client.update_issue(number, **fields)
        bucket = {"closed": res.closed, "open": res.reopened}.get(fields.get("state"), res.updated)
        bucket.append((t.id, number))
    return res
