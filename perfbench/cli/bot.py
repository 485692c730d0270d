"""perfbench bot: what talks to GitHub (perfbench/github.py does the talking)."""

from __future__ import annotations

import click

from perfbench.cli import cli
from perfbench.github import MARKER, GitHubClient

API_URL_HELP = ("GitHub API root [env GITHUB_API_URL; default https://api.github.com; "
                "GitHub Enterprise: https://HOST/api/v3].")


@cli.group()
def bot():
    """Post results to GitHub. The token comes from GITHUB_TOKEN and is never printed.

    \b
    Example (in CI, after a run):
      perfbench show latest --suite attention --format markdown > report.md
      GITHUB_TOKEN=... perfbench bot comment --repo octo-org/kernels --pr 42 --body report.md
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
def comment(repo, pr, body_file, api_url, dry_run, marker):
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
    action, url = client.upsert_pr_comment(pr, body, marker=marker)
    if action != "dry-run":
        click.echo(f"{action} comment {url or '(GitHub returned no URL)'}")
    return 0
