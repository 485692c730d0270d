#!/usr/bin/env bash
# Post (or update) the perfbench comment on a pull request from the comparison document a PR run
# uploaded. Runs in the privileged workflow_run job, so it treats the document as DATA: it is
# re-rendered by THIS checkout's perfbench (which validates it strictly and rejects an unknown
# schema_version), and the PR number comes from GitHub (`perfbench bot pr-number` on the head
# commit the event names), never from the document.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: ci/post-comment.sh --repo OWNER/NAME --sha SHA [--head-branch BRANCH] [--head-owner OWNER]
                          [--run-url URL] [--api-url URL] [--dry-run] DIR

DIR is where the PR run's artifact was downloaded; it holds comparison.json, or nothing.
 1. no DIR/comparison.json: nothing to post (notice), exit 0
 2. perfbench render DIR/comparison.json --format markdown -o WORK/comment.md
    (exit 0 or 1 = the document's verdict, both posted; 2 = rejected, nothing posted)
 3. perfbench bot pr-number --repo ... --sha SHA [--head-branch ...] [--head-owner ...]
    no open PR has that head (closed, or pushed to since): nothing to post (notice), exit 0
 4. perfbench bot comment --repo ... --pr N --body WORK/comment.md  (updates our earlier comment)
--run-url adds a link to the run that measured. Empty --head-branch/--head-owner are ignored.
--dry-run finds the PR for real (read-only) but only prints the comment it would post.

Needs: perfbench installed (PERFBENCH overrides the command; default .venv/bin/perfbench of this
checkout, else perfbench), GITHUB_TOKEN with `pull-requests: write` (read is enough with
--dry-run), and optionally GITHUB_API_URL or --api-url. Appends the comment to
$GITHUB_STEP_SUMMARY when set.

Exit codes: 0 posted, or nothing to post; 2 usage error or a document this perfbench rejects;
5 GitHub failed; otherwise perfbench's.
USAGE
}

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
default_pb=perfbench
[[ -x "$root/.venv/bin/perfbench" ]] && default_pb="$root/.venv/bin/perfbench"
read -r -a PB <<<"${PERFBENCH:-$default_pb}"

repo="" sha="" head_branch="" head_owner="" run_url="" api=() dry=() dir=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --repo) repo="${2:-}"; shift 2 ;;
    --sha) sha="${2:-}"; shift 2 ;;
    --head-branch) head_branch="${2:-}"; shift 2 ;;
    --head-owner) head_owner="${2:-}"; shift 2 ;;
    --run-url) run_url="${2:-}"; shift 2 ;;
    --api-url) api=(--api-url "${2:-}"); shift 2 ;;
    --dry-run) dry=(--dry-run); shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "error: unknown option: $1" >&2; usage >&2; exit 2 ;;
    *) [[ -n $dir ]] && { echo "error: one DIR only" >&2; exit 2; }; dir="$1"; shift ;;
  esac
done
if [[ -z $repo || -z $sha || -z $dir ]]; then
  echo "error: --repo, --sha and DIR are required" >&2; usage >&2; exit 2
fi
if [[ -n $run_url && ! $run_url =~ ^https?://[A-Za-z0-9._~:/?#@!$\&\'()*+,\;=%-]+$ ]]; then
  echo "error: --run-url '$run_url' is not a plain http(s) URL" >&2; exit 2
fi

doc="$dir/comparison.json"
if [[ ! -e $doc && ! -L $doc ]]; then
  echo "::notice::no comparison.json in $dir (the PR run uploaded none: it failed before measuring, or was cancelled); nothing to post"
  exit 0
fi
if [[ -L $doc || ! -f $doc ]]; then
  echo "error: $doc is not a regular file; not reading it" >&2; exit 2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# 2. re-render with this checkout's code; it validates the document and rejects what it cannot read.
#    render exits with the document's verdict: 0, or 1 on a regression / broken numerics (which is
#    exactly what the comment must show); 2 = invalid document.
set +e
"${PB[@]}" render "$doc" --format markdown -o "$work/comment.md"
rc=$?
set -e
if [[ $rc -ne 0 && $rc -ne 1 ]] || [[ ! -s $work/comment.md ]]; then
  echo "::error::perfbench render rejected the PR run's comparison document (exit $rc); nothing posted"
  exit "$(( rc > 1 ? rc : 2 ))"
fi

# 3. the PR, from GitHub and the event's head commit only
pr_args=(bot pr-number --repo "$repo" --sha "$sha")
[[ -n $head_branch ]] && pr_args+=(--head-branch "$head_branch")
[[ -n $head_owner ]] && pr_args+=(--head-owner "$head_owner")
pr_args+=("${api[@]}")
set +e
pr="$("${PB[@]}" "${pr_args[@]}")"
rc=$?
set -e
if [[ $rc -eq 1 ]]; then
  echo "::notice::no single open pull request has head $sha (see above); nothing posted"
  exit 0
fi
if [[ $rc -ne 0 ]]; then
  echo "::error::perfbench bot pr-number failed (exit $rc); nothing posted"
  exit "$rc"
fi
if ! [[ $pr =~ ^[1-9][0-9]*$ ]]; then
  echo "error: perfbench bot pr-number printed '$pr', not a PR number" >&2; exit 2
fi
echo "pull request: #$pr"

if [[ -n $run_url ]]; then
  printf '\n\n<sub>Measured by [this workflow run](%s) on head <code>%s</code>; re-rendered by perfbench from the default branch.</sub>\n' \
    "$run_url" "${sha:0:12}" >>"$work/comment.md"
fi
if [[ -n ${GITHUB_STEP_SUMMARY:-} ]]; then
  { echo "## perfbench comment for #$pr"; echo; cat "$work/comment.md"; } >>"$GITHUB_STEP_SUMMARY"
fi

# 4. post or update
"${PB[@]}" bot comment --repo "$repo" --pr "$pr" --body "$work/comment.md" "${api[@]}" "${dry[@]}"
