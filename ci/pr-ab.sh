#!/usr/bin/env bash
# A pull request's A/B: measure the merge base and the PR's head side by side on this runner with
# `perfbench ab`, write the comparison document, and record ab's exit code for later steps.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: ci/pr-ab.sh --base-branch BRANCH [--head-rev REV] [--suite S] [--filter F]...
                   [--calibration FILE] [-o FILE] [--no-fail]

Computes the merge base of REV (default HEAD) with BRANCH (origin/BRANCH when that remote branch
exists, else the local branch; the clone needs full history: fetch-depth: 0), then runs

  perfbench ab --base-rev MERGE_BASE [--head-rev REV] --suite S --filter F... \
               [--calibration FILE] --format json -o FILE

--calibration FILE is passed only when FILE exists (the nightly's may be missing: ab then uses
its stated default between-run spread). -o defaults to comparison.json, --suite to attention;
without --filter the whole suite is measured.

In GitHub Actions it writes `exit-code` and `merge-base` to $GITHUB_OUTPUT and a markdown preview
(`perfbench render`) to $GITHUB_STEP_SUMMARY.

Exit codes: ab's own (0 ok, 1 a regression or broken numerics, 2 usage or input error, ...);
with --no-fail a 1 is recorded and the script exits 0, so the steps after it (the upload) run
and a later step fails the job. 2 also for this script's own usage errors.

PERFBENCH overrides the command (default: .venv/bin/perfbench of this checkout, else perfbench).
Measures: run it on a quiet machine, never beside another measurement.
USAGE
}

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
default_pb=perfbench
[[ -x "$root/.venv/bin/perfbench" ]] && default_pb="$root/.venv/bin/perfbench"
read -r -a PB <<<"${PERFBENCH:-$default_pb}"

base_branch="" head_rev="" suite="attention" calibration="" out="comparison.json" no_fail=0
filters=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --base-branch) base_branch="${2:-}"; shift 2 ;;
    --head-rev) head_rev="${2:-}"; shift 2 ;;
    --suite) suite="${2:-}"; shift 2 ;;
    --filter) filters+=(--filter "${2:-}"); shift 2 ;;
    --calibration) calibration="${2:-}"; shift 2 ;;
    -o|--output) out="${2:-}"; shift 2 ;;
    --no-fail) no_fail=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
if [[ -z $base_branch ]]; then
  echo "error: --base-branch is required" >&2; usage >&2; exit 2
fi

if git rev-parse --verify -q "refs/remotes/origin/$base_branch^{commit}" >/dev/null; then
  base_ref="origin/$base_branch"
elif git rev-parse --verify -q "refs/heads/$base_branch^{commit}" >/dev/null; then
  base_ref="$base_branch"
else
  echo "error: no branch '$base_branch' (neither origin/$base_branch nor a local one); in Actions, check out with fetch-depth: 0" >&2
  exit 2
fi
head_commit="${head_rev:-HEAD}"
if ! merge_base="$(git merge-base "$base_ref" "$head_commit")"; then
  echo "error: $base_ref and $head_commit have no merge base (a shallow clone? use fetch-depth: 0)" >&2
  exit 2
fi
echo "merge base of $head_commit with $base_ref: $merge_base"

args=(ab --base-rev "$merge_base")
[[ -n $head_rev ]] && args+=(--head-rev "$head_rev")
args+=(--suite "$suite" "${filters[@]}")
if [[ -n $calibration && -f $calibration ]]; then
  args+=(--calibration "$calibration")
else
  echo "no calibration file${calibration:+ at $calibration}: ab uses its default between-run spread"
fi
args+=(--format json -o "$out")

rm -f "$out"
echo "+ perfbench ${args[*]}"
set +e
"${PB[@]}" "${args[@]}"
rc=$?
set -e
echo "perfbench ab exited $rc"

if [[ -n ${GITHUB_OUTPUT:-} ]]; then
  { echo "exit-code=$rc"; echo "merge-base=$merge_base"; } >>"$GITHUB_OUTPUT"
fi

if [[ -n ${GITHUB_STEP_SUMMARY:-} ]]; then
  if [[ -f $out ]]; then
    preview="$(mktemp)"
    set +e  # render exits with the document's verdict: 0, or 1 on a regression; 2 = unreadable
    "${PB[@]}" render "$out" --format markdown -o "$preview"
    render_rc=$?
    set -e
    if [[ $render_rc -le 1 && -s $preview ]]; then
      { echo "## perfbench A/B: merge base ${merge_base:0:12} vs head"; echo; cat "$preview"; } >>"$GITHUB_STEP_SUMMARY"
    else
      echo "::warning::perfbench render could not render $out for the job summary"
    fi
    rm -f "$preview"
  else
    echo "perfbench ab exited $rc and wrote no comparison document." >>"$GITHUB_STEP_SUMMARY"
  fi
fi

if [[ $no_fail -eq 1 && $rc -eq 1 ]]; then
  echo "::warning::perfbench ab found a regression or broken numerics (exit 1); recorded, the job fails after the upload"
  exit 0
fi
exit "$rc"
