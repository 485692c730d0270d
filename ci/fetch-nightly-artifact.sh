#!/usr/bin/env bash
# Download one artifact (e.g. `history`, `calibration`) of the newest nightly run that can be
# trusted, into DIR. A missing artifact is not an error: it prints a notice and exits 0, and the
# caller goes on without it (a first nightly starts a new database; `perfbench ab` uses its
# stated default between-run spread).
#
# Trusted = a run of the nightly workflow FILE itself, on the default branch, started by
# `schedule` or `workflow_dispatch`, and finished (success or failure: a nightly whose run found a
# failed cell still uploads its database). Pull requests cannot start such a run: a PR, even one
# that edits the nightly workflow, runs with event `pull_request`, and its head branch (which a
# fork may name after ours) does not make it a schedule/dispatch run.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: ci/fetch-nightly-artifact.sh --name NAME --dest DIR [--repo OWNER/NAME] [--branch BRANCH]
                                    [--workflow FILE] [--limit N]

Download artifact NAME of the newest trusted nightly run into DIR (created; files land directly
in it). Trusted: workflow FILE (default perfbench-nightly.yml), head branch BRANCH (default: the
repository's default branch), event schedule or workflow_dispatch, completed. Runs without the
artifact (expired, or not uploaded because that night failed early) are skipped; at most N
(default 20) runs are looked at.

Needs: gh (GitHub CLI), python3, and GH_TOKEN with `actions: read` on the repository.
--repo defaults to $GITHUB_REPOSITORY.

Exit codes: 0 downloaded, or nothing to download (a notice says so); 2 usage error;
5 GitHub could not be asked (gh failed listing runs).
USAGE
}

name="" dest="" repo="${GITHUB_REPOSITORY:-}" branch="" workflow="perfbench-nightly.yml" limit=20
while [[ $# -gt 0 ]]; do
  case "$1" in
    --name) name="${2:-}"; shift 2 ;;
    --dest) dest="${2:-}"; shift 2 ;;
    --repo) repo="${2:-}"; shift 2 ;;
    --branch) branch="${2:-}"; shift 2 ;;
    --workflow) workflow="${2:-}"; shift 2 ;;
    --limit) limit="${2:-}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
if [[ -z $name || -z $dest || -z $repo ]]; then
  echo "error: --name, --dest and --repo (or GITHUB_REPOSITORY) are required" >&2; usage >&2; exit 2
fi
if ! [[ $limit =~ ^[1-9][0-9]*$ ]]; then
  echo "error: --limit must be a positive integer, not '$limit'" >&2; exit 2
fi
if ! command -v gh >/dev/null 2>&1; then
  echo "error: gh (the GitHub CLI) is not installed" >&2; exit 2
fi

if [[ -z $branch ]]; then
  if ! branch="$(gh api "repos/$repo" --jq .default_branch)" || [[ -z $branch ]]; then
    echo "error: cannot ask GitHub for $repo's default branch (GH_TOKEN set? network?)" >&2; exit 5
  fi
fi

if ! runs_json="$(gh run list --repo "$repo" --workflow "$workflow" --branch "$branch" --status completed \
                    --limit "$limit" --json databaseId,event,headBranch,conclusion)"; then
  echo "error: gh could not list the runs of $workflow in $repo" >&2; exit 5
fi
# newest first (gh's order); keep only trusted runs; ids only
mapfile -t ids < <(BRANCH="$branch" python3 -c '
import json, os, sys
for r in json.load(sys.stdin):
    if (r.get("event") in ("schedule", "workflow_dispatch") and r.get("headBranch") == os.environ["BRANCH"]
            and r.get("conclusion") in ("success", "failure") and str(r.get("databaseId", "")).isdigit()):
        print(r["databaseId"])
' <<<"$runs_json")

if [[ ${#ids[@]} -eq 0 ]]; then
  echo "::notice::no completed schedule/workflow_dispatch run of $workflow on $branch: no '$name' artifact to use"
  exit 0
fi

mkdir -p "$dest"
for id in "${ids[@]}"; do
  tmp="$(mktemp -d)"
  if gh run download "$id" --repo "$repo" --name "$name" --dir "$tmp" >/dev/null 2>&1; then
    cp -R "$tmp"/. "$dest"/
    rm -rf "$tmp"
    echo "downloaded '$name' from run $id of $workflow on $branch into $dest"
    exit 0
  fi
  rm -rf "$tmp"
  echo "run $id has no '$name' artifact (expired or never uploaded); trying an older run"
done
echo "::notice::none of the last ${#ids[@]} trusted runs of $workflow on $branch has a '$name' artifact; going on without it"
exit 0
