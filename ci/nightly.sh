#!/usr/bin/env bash
# The nightly: carry the history database forward one night. Download the previous nightly's
# database, run the full suite into it, calibrate (A/A noise) into it, export the calibration for
# pull requests. The workflow then uploads the database (`history`) and the calibration.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: ci/nightly.sh [--suite S] [--history DIR] [--calibration FILE] [--calibrate-filter F]...
                     [--fetch [--repo OWNER/NAME] [--branch BRANCH]]

 1. with --fetch: the previous nightly's `history` artifact into DIR
    (ci/fetch-nightly-artifact.sh; none yet = a new database). Without it, DIR as it is.
 2. perfbench run --suite S --db sqlite:///DIR/results.db
    exit 1 (a cell of ours failed) is recorded and the night goes on: the database is complete.
 3. perfbench calibrate --suite S [--filter F]... --db sqlite:///DIR/results.db
    (the whole suite by default: about 3 rounds x 1.5 x the run's time; --calibrate-filter
    narrows it, e.g. to the cells pull requests measure)
 4. perfbench calibration export -o FILE --db sqlite:///DIR/results.db
Defaults: --suite attention, --history history, --calibration calibration.json.

In GitHub Actions it writes to $GITHUB_OUTPUT: run-exit-code, history-ok=true once the database
holds the night's run (upload it), calibration-ok=true once FILE is written; and the run's
markdown table to $GITHUB_STEP_SUMMARY. --repo defaults to $GITHUB_REPOSITORY; with --fetch,
--branch defaults to the repository's default branch (asked of GitHub). When GITHUB_REF_NAME is
set and a branch is known, they must be equal: the nightly writes history only from the
default branch.

Needs: perfbench installed (PERFBENCH overrides the command; default .venv/bin/perfbench of this
checkout, else perfbench), gcc; with --fetch also gh, python3 and GH_TOKEN (`actions: read`).
Measures for a long time: run it on a quiet machine, never beside another measurement.

Exit codes: 0 the database and the calibration are written (even when the run's exit code was 1:
see run-exit-code); 2 usage error or not on the default branch; 5 GitHub could not be asked;
otherwise the code of the step that failed.
USAGE
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
default_pb=perfbench
[[ -x "$root/.venv/bin/perfbench" ]] && default_pb="$root/.venv/bin/perfbench"
read -r -a PB <<<"${PERFBENCH:-$default_pb}"

suite="attention" history="history" calibration="calibration.json" fetch=0 repo="${GITHUB_REPOSITORY:-}" branch=""
cal_filters=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --suite) suite="${2:-}"; shift 2 ;;
    --history) history="${2:-}"; shift 2 ;;
    --calibration) calibration="${2:-}"; shift 2 ;;
    --calibrate-filter) cal_filters+=(--filter "${2:-}"); shift 2 ;;
    --fetch) fetch=1; shift ;;
    --repo) repo="${2:-}"; shift 2 ;;
    --branch) branch="${2:-}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
if [[ -z $suite || -z $history || -z $calibration ]]; then
  echo "error: --suite, --history and --calibration must not be empty" >&2; exit 2
fi
if [[ $fetch -eq 1 && -z $branch ]]; then
  if [[ -z $repo ]]; then
    echo "error: --fetch needs --repo (or GITHUB_REPOSITORY)" >&2; exit 2
  fi
  if ! branch="$(gh api "repos/$repo" --jq .default_branch)" || [[ -z $branch ]]; then
    echo "error: cannot ask GitHub for $repo's default branch (GH_TOKEN set? network?)" >&2; exit 5
  fi
fi
if [[ -n $branch && -n ${GITHUB_REF_NAME:-} && $branch != "$GITHUB_REF_NAME" ]]; then
  echo "error: this run is on '$GITHUB_REF_NAME', not on '$branch': the nightly writes history only from the default branch" >&2
  exit 2
fi

output() {
  if [[ -n ${GITHUB_OUTPUT:-} ]]; then echo "$1" >>"$GITHUB_OUTPUT"; fi
}

if [[ $fetch -eq 1 ]]; then
  bash "$here/fetch-nightly-artifact.sh" --name history --dest "$history" --repo "$repo" --branch "$branch"
fi
mkdir -p "$history"
db="sqlite:///$(cd "$history" && pwd)/results.db"
if [[ -f $history/results.db ]]; then
  echo "history: $history/results.db (carried from the previous nightly)"
else
  echo "history: none yet; $history/results.db starts empty"
fi

# 2. the full suite
set +e
"${PB[@]}" run --suite "$suite" --db "$db"
run_rc=$?
set -e
output "run-exit-code=$run_rc"
if [[ $run_rc -ne 0 && $run_rc -ne 1 ]]; then
  echo "::error::perfbench run failed (exit $run_rc); the database is not uploaded"
  exit "$run_rc"
fi
output "history-ok=true"
if [[ $run_rc -eq 1 ]]; then
  echo "::warning::perfbench run: a cell of ours failed (exit 1); the run is stored, the job fails after the uploads"
fi
if [[ -n ${GITHUB_STEP_SUMMARY:-} ]]; then
  table="$(mktemp)"
  if "${PB[@]}" show latest --suite "$suite" --db "$db" --format markdown -o "$table"; then
    { echo "## perfbench nightly: $suite"; echo; cat "$table"; } >>"$GITHUB_STEP_SUMMARY"
  else
    echo "::warning::perfbench show could not render tonight's run for the job summary"
  fi
  rm -f "$table"
fi

# 3. + 4. calibration
"${PB[@]}" calibrate --suite "$suite" "${cal_filters[@]}" --db "$db"
"${PB[@]}" calibration export -o "$calibration" --db "$db"
output "calibration-ok=true"
echo "nightly done: $history/results.db, $calibration (perfbench run exited $run_rc)"
