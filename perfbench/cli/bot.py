"""perfbench bot: what talks to GitHub (perfbench/github.py does the talking)."""

from __future__ import annotations

import click

from perfbench.cli import cli
from perfbench.github import MARKER, GitHubClient, check_sha

API_URL_HELP = ("GitHub API root [env GITHUB_API_URL; default https://api.github.com; "
                "GitHub Enterprise: https://HOST/api/v3].")


@cli.group()
def bot():
    """Post results to GitHub. The token comes from GITHUB_TOKEN and is never printed.

    \b
    Example (in CI, after a run):
      perfbench show latest --suite attention --format markdown > report.md
      GITHUB_TOKEN=... perfbench bot comment --repo octo-org/kernels --pr 42 --body report.md

    \b
    Which PR? (a workflow_run job knows the head commit, not the PR):
      GITHUB_TOKEN=... perfbench bot pr-number --repo octo-org/kernels --sha "$HEAD_SHA"
    """


@bot.command("comment")
@click.option("--repo", required=True, metavar="OWNER/NAME", help="The repository, e.g. octo-org/kernels.")
@click.option("--pr", required=True, type=click.IntRange(min=1), metavar="N", help="The pull request number.")
@click.option("--body", "body_file", required=True, type=click.File("r", encoding="utf-8"), metavar="FILE",
              help="Markdown file with the comment ('-' reads stdin).")
@click.option("--api-url", default=None, metavar="URL", help=API_URL_HELP)
@click.option("--dry-run", is_flag=True, help="Send nothing; print the requests that would be sent (no token needed).")
@click.option("--marker", default=MARKER, show_default=True,
              help="Hidden text that identifies our comment, so a rerun updates it instead of adding another.")
@click.option("--author", default="github-actions[bot]", show_default=True, envvar="PERFBENCH_BOT_AUTHOR",
              metavar="LOGIN", help="Only a marked comment by this login is ours to update (anyone can paste the "
                                    "marker); the login the token posts as [env PERFBENCH_BOT_AUTHOR].")
def comment(repo, pr, body_file, api_url, dry_run, marker, author):
    """Post FILE as a comment on pull request N, or update the comment posted before.

    The comment carries a hidden marker (an HTML comment); a later run finds the newest comment
    containing it and edits that one, so a PR gets one perfbench comment however often CI runs.
    Bodies over GitHub's limit (65536 characters) are cut short with a visible note.

    \b
    The token (GITHUB_TOKEN) needs `issues: write` / `pull-requests: write` on the repository;
    in GitHub Actions: `permissions: pull-requests: write` and GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}.

    \b
    Examples:
      perfbench bot comment --repo octo-org/kernels --pr 42 --body report.md
      perfbench show latest --format markdown | perfbench bot comment --repo octo-org/kernels --pr 42 --body -
      perfbench bot comment --repo octo-org/kernels --pr 42 --body report.md --dry-run

    Exit codes: 0 posted, 2 bad input or GITHUB_TOKEN unset, 5 GitHub refused or failed.
    """
    body = body_file.read()

    def log(line: str) -> None:
        click.echo(line, err=not dry_run)

    client = GitHubClient(repo, api_url=api_url, dry_run=dry_run, log=log)
    action, url = client.upsert_pr_comment(pr, body, marker=marker, author=author)
    if action != "dry-run":
        click.echo(f"{action} comment {url or '(GitHub returned no URL)'}")
    return 0


@bot.command("pr-number")
@click.option("--repo", required=True, metavar="OWNER/NAME", help="The repository the PR is opened against.")
@click.option("--sha", required=True, metavar="SHA", help="The PR's head commit: a full SHA, 40 hex digits.")
@click.option("--head-branch", default=None, metavar="BRANCH",
              help="The PR's head branch (narrows the search to OWNER:BRANCH; needed for PRs from forks, "
                   "whose commits GitHub may not associate with this repository).")
@click.option("--head-owner", default=None, metavar="OWNER",
              help="Owner of the head branch's repository (a fork's owner) [default: the owner in --repo]. "
                   "Needs --head-branch.")
@click.option("--api-url", default=None, metavar="URL", help=API_URL_HELP)
@click.option("--dry-run", is_flag=True, help="Send nothing; print the requests that would be sent (no token needed).")
def pr_number(repo, sha, head_branch, head_owner, api_url, dry_run):
    """Print the number of the open pull request whose head commit is exactly SHA.

    Only open PRs whose head is SHA count: a PR pushed to since, or one that merely contains the
    commit, is not it. With --head-branch it lists the open PRs from OWNER:BRANCH; when that finds
    none, or without a branch, it asks GitHub which PRs are associated with the commit.
    Prints just the number, so a script can capture it.

    \b
    The token (GITHUB_TOKEN) needs read access to the repository's pull requests;
    in GitHub Actions: `permissions: pull-requests: read` (or write).

    \b
    Examples:
      perfbench bot pr-number --repo octo-org/kernels --sha 0123456789abcdef0123456789abcdef01234567
      perfbench bot pr-number --repo octo-org/kernels --sha "$SHA" --head-branch fix-gqa --head-owner a-fork

    Exit codes: 0 found (the number on stdout); 1 no open PR has that head, or several do
    (the message lists them); 2 bad input or GITHUB_TOKEN unset; 5 GitHub refused or failed.
    """
    sha = check_sha(sha)

    def log(line: str) -> None:
        click.echo(line, err=not dry_run)

    client = GitHubClient(repo, api_url=api_url, dry_run=dry_run, log=log)
    if dry_run:
        client.open_pulls_with_head(sha, head_branch, head_owner)
        return 0
    click.echo(client.pr_number_for_sha(sha, head_branch, head_owner))
    return 0
