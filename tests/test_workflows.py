"""The GitHub workflows (.github/workflows/) and the scripts they call (ci/), without measuring.

* actionlint (and shellcheck, which actionlint also runs on every `run:` script) finds nothing.
* Structural checks that fail on a fork-safety regression: the pull_request workflow uses no
  secrets and only read permissions and always uploads its artifact; the workflow_run workflow
  never checks out PR code, takes the PR number only from GitHub (by the event's head commit) and
  never puts an untrusted event string inside a `run:` script; the nightly keeps the history.
* The ci/ scripts: syntax, usage text, and their logic with stand-ins (a fake `perfbench` that
  records its arguments, a fake `gh`, and the fake GitHub server of tests/test_github.py).
  Nothing here runs `perfbench ab`, `run` or `calibrate`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_github import MARKER, REPO, TOKEN, FakeGitHub, serve

yaml = pytest.importorskip("yaml", reason="PyYAML is in the test extra: pip install -e '.[test]'")

WORKFLOWS = ROOT / ".github" / "workflows"
CI = ROOT / "ci"
SCRIPTS = sorted(CI.glob("*.sh"))
PR_WF, COMMENT_WF, NIGHTLY_WF = "perfbench-pr.yml", "perfbench-comment.yml", "perfbench-nightly.yml"
SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER = "89abcdef0123456789abcdef0123456789abcdef"
EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)
# event fields that are safe inside a run: script: numbers and hex SHAs GitHub itself assigns
SAFE_EVENT = re.compile(r"^github\.event\.[\w.]*\b(id|run_id|number|run_number|run_attempt|head_sha|sha)$")


# -- helpers ------------------------------------------------------------------------------------


def tool(name: str) -> str | None:
    """A tool from the test extra: next to this Python (the venv), else on PATH."""
    return shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def need(name: str) -> str:
    """The tool, or a loud skip locally / a failure under CI=true (the project's rule)."""
    path = tool(name)
    if path is None:
        msg = f"{name} is not installed: pip install -e '.[test]' (it is in the test extra)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def load(name: str) -> dict:
    wf = yaml.safe_load((WORKFLOWS / name).read_text())
    assert isinstance(wf, dict), name
    if True in wf:  # PyYAML (YAML 1.1) reads the key `on` as the boolean True
        wf["on"] = wf.pop(True)
    return wf


def triggers(wf: dict) -> dict:
    on = wf["on"]
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    return dict(on)


def steps(wf: dict):
    """(job id, step) for every step of every job."""
    for job_id, job in wf["jobs"].items():
        for step in job.get("steps", []):
            yield job_id, step


def uses(step: dict, action: str) -> bool:
    return str(step.get("uses", "")).split("@")[0] == action


def permission_sets(wf: dict) -> list[dict]:
    """The workflow's permissions and every job's; each must be given as a mapping."""
    out = [wf.get("permissions")]
    out += [job.get("permissions") for job in wf["jobs"].values() if "permissions" in job]
    return out


def make_executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def script_env(tmp_path: Path, **extra) -> dict:
    """A clean environment for the ci/ scripts: none of a real Actions run's GITHUB_* files."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1"
    env["PERFBENCH_LOCK"] = str(tmp_path / "lock")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_script(name: str, *args, env: dict, cwd: Path = ROOT, timeout: float = 120):
    return subprocess.run(["bash", str(CI / name), *map(str, args)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


FAKE_PERFBENCH = textwrap.dedent("""\
    #!{python}
    # a stand-in for perfbench: records its arguments, writes -o files, exits as told
    import json, os, sys
    args = sys.argv[1:]
    with open(os.environ["FAKE_LOG"], "a") as f:
        f.write(json.dumps(args) + "\\n")
    cmd = " ".join(a for a in args[:2] if not a.startswith("-"))
    rc = json.loads(os.environ.get("FAKE_RC", "{{}}")).get(args[0], 0)
    if "-o" in args and rc in (0, 1):  # ab writes its document on 0 and 1 only
        with open(args[args.index("-o") + 1], "w") as f:
            f.write("PREVIEW of " + cmd if args[0] in ("render", "show") else '{{"fake": true}}')
    sys.exit(rc)
""")


def fake_perfbench(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "perfbench-calls.jsonl"
    exe = make_executable(tmp_path / "fake-perfbench", FAKE_PERFBENCH.format(python=sys.executable))
    return exe, log


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def outputs(path: Path) -> dict:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


# -- linters ------------------------------------------------------------------------------------


def test_workflows_exist():
    assert {p.name for p in WORKFLOWS.glob("*.yml")} >= {PR_WF, COMMENT_WF, NIGHTLY_WF}
    assert {p.name for p in SCRIPTS} >= {"pr-ab.sh", "post-comment.sh", "nightly.sh", "fetch-nightly-artifact.sh"}


def test_actionlint_finds_nothing():
    actionlint = need("actionlint")
    env = dict(os.environ)
    shellcheck = tool("shellcheck")  # actionlint checks run: scripts with it when it is on PATH
    env["PATH"] = os.pathsep.join(([str(Path(shellcheck).parent)] if shellcheck else []) + [env.get("PATH", "")])
    files = sorted(str(p.relative_to(ROOT)) for p in WORKFLOWS.glob("*.y*ml"))
    r = subprocess.run([actionlint, "-color=false", *files], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and not r.stdout.strip(), f"actionlint:\n{r.stdout}{r.stderr}"


def test_ci_scripts_shellcheck_clean():
    shellcheck = need("shellcheck")
    r = subprocess.run([shellcheck, "--severity=style", *map(str, SCRIPTS)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"shellcheck:\n{r.stdout}{r.stderr}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_ci_script_syntax_and_usage(script, tmp_path):
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
    assert os.access(script, os.X_OK), f"{script.name} is not executable"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    env = script_env(tmp_path)
    r = run_script(script.name, "--help", env=env)
    assert r.returncode == 0 and r.stdout.startswith(f"Usage: ci/{script.name}") and "Exit codes" in r.stdout
    r = run_script(script.name, "--no-such-option", env=env)
    assert r.returncode == 2 and "unknown" in r.stderr and "Usage:" in r.stderr


# -- structure: what keeps each workflow fork-safe ----------------------------------------------


def test_no_workflow_uses_pull_request_target():
    for p in WORKFLOWS.glob("*.y*ml"):
        assert "pull_request_target" not in triggers(load(p.name)), p.name


def test_pr_workflow_is_unprivileged():
    wf = load(PR_WF)
    text = (WORKFLOWS / PR_WF).read_text()
    assert set(triggers(wf)) == {"pull_request"}
    assert "secrets." not in text, "the pull_request workflow must not reference any secret"
    for perms in permission_sets(wf):
        assert isinstance(perms, dict) and perms, "permissions must be spelled out, read-only"
        assert set(perms.values()) <= {"read", "none"}, perms
    assert wf["permissions"].get("contents") == "read"
    for job in wf["jobs"].values():
        assert job["runs-on"] == "ubuntu-latest" and int(job["timeout-minutes"]) > 0
    assert wf["concurrency"]["cancel-in-progress"] is True
    assert "pull_request.number" in wf["concurrency"]["group"]


def test_pr_workflow_steps_and_order():
    wf = load(PR_WF)
    (job,) = wf["jobs"].values()
    st = job["steps"]
    idx = {name: i for i, s in enumerate(st)
           for name, ok in (("checkout", uses(s, "actions/checkout")), ("upload", uses(s, "actions/upload-artifact")),
                            ("ab", "ci/pr-ab.sh" in str(s.get("run", ""))),
                            ("fetch", "ci/fetch-nightly-artifact.sh" in str(s.get("run", ""))),
                            ("verdict", "steps.ab.outputs.exit-code" in json.dumps(s)))
           if ok}
    assert set(idx) == {"checkout", "upload", "ab", "fetch", "verdict"}, idx
    assert idx["checkout"] < idx["fetch"] < idx["ab"] < idx["upload"] < idx["verdict"]
    assert st[idx["checkout"]]["with"]["fetch-depth"] == 0
    assert st[idx["checkout"]]["with"].get("persist-credentials") is False
    ab = st[idx["ab"]]
    assert ab.get("id") == "ab" and "--no-fail" in ab["run"] and "--base-branch" in ab["run"]
    assert "--filter" in ab["run"] and "-o comparison.json" in ab["run"] and "--calibration" in ab["run"]
    upload = st[idx["upload"]]
    assert "always()" in str(upload.get("if", "")), "the comparison must be uploaded even when ab exits 1"
    assert upload["with"]["name"] == "perfbench-comparison" and upload["with"]["path"] == "comparison.json"
    assert "always()" in str(st[idx["verdict"]].get("if", ""))
    # calibration is optional: a GitHub hiccup while fetching it must not stop the comparison
    assert st[idx["fetch"]].get("continue-on-error") is True
    # the PR never uploads under the nightly's artifact names
    names = {s["with"]["name"] for _, s in steps(wf) if uses(s, "actions/upload-artifact")}
    assert not names & {"history", "calibration"}


def test_comment_workflow_never_runs_pr_code():
    wf = load(COMMENT_WF)
    pr = load(PR_WF)
    on = triggers(wf)
    assert set(on) == {"workflow_run"}
    assert on["workflow_run"]["workflows"] == [pr["name"]] and on["workflow_run"]["types"] == ["completed"]
    perms = wf["permissions"]
    # contents: read too: without it the checkout of a private repository fails
    assert perms == {"contents": "read", "pull-requests": "write", "actions": "read"}, perms
    assert all("permissions" not in job for job in wf["jobs"].values())
    for job in wf["jobs"].values():
        assert "workflow_run.event == 'pull_request'" in job["if"]
    checkouts = [s for _, s in steps(wf) if uses(s, "actions/checkout")]
    assert checkouts, "the default branch's ci/ and perfbench are checked out"
    for s in checkouts:
        w = s.get("with", {})
        assert str(w.get("ref", "")).replace(" ", "") == "${{github.event.repository.default_branch}}", w
        assert "repository" not in w, "never another repository (a fork)"
        assert w.get("persist-credentials") is False
    for _, s in steps(wf):  # nothing PR-derived as a ref, repository or action anywhere
        blob = json.dumps({k: v for k, v in s.items() if k != "env"})
        for bad in ("head_branch", "head_repository", "pull_requests", "head_commit", "pull_request."):
            assert bad not in blob, (bad, s)
        assert "workflow_run.head_sha" not in json.dumps(s.get("with", {})), s


def test_comment_workflow_takes_the_pr_from_the_event_sha():
    wf = load(COMMENT_WF)
    downloads = [s for _, s in steps(wf) if uses(s, "actions/download-artifact")]
    assert len(downloads) == 1
    d = downloads[0]["with"]
    assert d["name"] == "perfbench-comparison"
    assert d["run-id"].replace(" ", "") == "${{github.event.workflow_run.id}}"
    assert "secrets.GITHUB_TOKEN" in d["github-token"]
    assert "runner.temp" in d["path"], "untrusted files go outside the checkout"
    assert downloads[0].get("continue-on-error") is True, "no artifact = nothing to post, not a failure"
    posts = [s for _, s in steps(wf) if "ci/post-comment.sh" in str(s.get("run", ""))]
    assert len(posts) == 1
    post = posts[0]
    env = {k: str(v).replace(" ", "") for k, v in post["env"].items()}
    assert env["HEAD_SHA"] == "${{github.event.workflow_run.head_sha}}"
    assert env["GITHUB_TOKEN"] == "${{secrets.GITHUB_TOKEN}}"
    assert '--sha "$HEAD_SHA"' in post["run"]
    assert "--pr" not in post["run"] and "comparison.json" not in post["run"]
    script = (CI / "post-comment.sh").read_text().split("\nUSAGE\n}", 1)[1]  # the code after the usage text
    assert re.search(r'pr="\$\("\$\{PB\[@\]\}" "\$\{pr_args\[@\]\}"\)"', script)
    assert 'pr_args=(bot pr-number --repo "$repo" --sha "$sha")' in script
    assert 'bot comment --repo "$repo" --pr "$pr"' in script
    assert script.count("--pr ") == 1, "the PR number comes from pr-number only"


def test_no_untrusted_event_strings_inside_run_scripts():
    for p in WORKFLOWS.glob("*.y*ml"):
        for job_id, s in steps(load(p.name)):
            for expr in EXPR.findall(str(s.get("run", ""))):
                expr = expr.strip()
                if "github.event" in expr or "github.head_ref" in expr:
                    assert SAFE_EVENT.match(expr), (
                        f"{p.name} job {job_id}: ${{{{ {expr} }}}} inside a run: script is a script-injection "
                        "hole; pass it through env: and use \"$VAR\"")


def privileged(name: str) -> bool:
    """A workflow that can write (any `write` permission) or reads a secret."""
    wf = load(name)
    writes = any(isinstance(p, dict) and "write" in p.values() or p in ("write-all", None)
                 for p in permission_sets(wf))
    return writes or "secrets." in (WORKFLOWS / name).read_text()


USES_LINE = re.compile(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$")
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def test_every_action_is_pinned_by_commit_sha():
    """A tag can be moved to other code; a full commit SHA cannot. The tag it stands for is kept
    in a trailing comment (`uses: actions/checkout@<sha> # v6.1.0`), for humans and Dependabot."""
    assert privileged(COMMENT_WF) and not privileged(PR_WF)
    for p in WORKFLOWS.glob("*.y*ml"):
        lines = [USES_LINE.match(line) for line in p.read_text().splitlines()]
        found = [m for m in lines if m]
        assert len(found) == sum(1 for _, s in steps(load(p.name)) if "uses" in s), p.name
        for m in found:
            ref, rest = m.group(1).strip("\"'"), m.group(2)
            if ref.startswith("./"):
                continue  # a local action: the checked-out code itself
            assert PINNED.match(ref), f"{p.name}: `uses: {ref}` is not pinned to a full commit SHA"
            assert re.fullmatch(r"\s+#\s*v\d+(\.\d+)*\s*", rest), f"{p.name}: `uses: {ref}` lacks its `# vX.Y.Z`"


def pip_installs(script: str) -> list[list[str]]:
    """The argument lists after `pip install` in a run: script (continuation lines joined)."""
    out = []
    for line in script.replace("\\\n", " ").splitlines():
        for cmd in re.split(r"&&|\|\||;", line):
            words = shlex.split(cmd, comments=True)
            for i in range(len(words) - 1):
                if words[i].endswith("pip") and words[i + 1] == "install":
                    out.append(words[i + 2:])
    return out


def test_privileged_workflows_install_only_hash_pinned_dependencies():
    """Next to a write token, pip installs nothing unpinned: the dependencies from a lock whose every
    line carries --hash (pip --require-hashes), the project itself with --no-deps --no-index."""
    checked = 0
    for p in WORKFLOWS.glob("*.y*ml"):
        if not privileged(p.name):
            continue
        for _, s in steps(load(p.name)):
            for args in pip_installs(str(s.get("run", ""))):
                checked += 1
                assert "--no-deps" in args, (p.name, args)
                if "--no-index" in args:
                    assert args[-2:] == ["-e", "."] or args[-1] == ".", (p.name, args)
                    continue
                assert "--require-hashes" in args and "-r" in args, (p.name, args)
                lock = ROOT / args[args.index("-r") + 1]
                assert lock.parent == CI and lock.is_file(), lock
                reqs = re.sub(r"\\\n", " ", re.sub(r"(?m)^\s*#.*\n", "", lock.read_text())).splitlines()
                reqs = [r for r in reqs if r.strip()]
                assert reqs and all(re.match(r"^[\w.-]+==[\w.!+-]+ .*--hash=sha256:[0-9a-f]{64}", r) for r in reqs), lock
                pinned = {re.split(r"==", r)[0].lower().replace("_", "-") for r in reqs}
                # the lock covers every runtime dependency and the build backend (no build isolation)
                pyproject = (ROOT / "pyproject.toml").read_text()
                deps = re.search(r"(?ms)^dependencies = \[(.*?)^\]", pyproject).group(1)
                names = {re.match(r"[\w.-]+", d).group(0).lower().replace("_", "-")
                         for d in re.findall(r'"([^"]+)"', deps)}
                assert names and names | {"setuptools", "wheel"} <= pinned, sorted(names - pinned)
                # ... for the Python the job sets up (wheels and markers are per Python version)
                pythons = {str(st["with"]["python-version"]) for _, st in steps(load(p.name))
                           if uses(st, "actions/setup-python")}
                assert len(pythons) == 1 and f"CPython {pythons.pop()} " in lock.read_text(), lock
    assert checked >= 2, "the comment workflow installs perfbench"


def test_nightly_keeps_history_and_calibration():
    wf = load(NIGHTLY_WF)
    on = triggers(wf)
    assert set(on) == {"schedule", "workflow_dispatch"}
    assert wf["permissions"] == {"contents": "read", "actions": "read"}
    assert wf["concurrency"]["cancel-in-progress"] is False
    (job,) = wf["jobs"].values()
    assert "default_branch" in job["if"]
    st = job["steps"]
    nightly = [i for i, s in enumerate(st) if "ci/nightly.sh" in str(s.get("run", ""))]
    assert len(nightly) == 1 and st[nightly[0]]["id"] == "nightly" and "--fetch" in st[nightly[0]]["run"]
    up = {s["with"]["name"]: (i, s) for i, s in enumerate(st) if uses(s, "actions/upload-artifact")}
    assert set(up) == {"history", "calibration"}
    for name, (i, s) in up.items():
        assert i > nightly[0]
        assert "always()" in s["if"] and f"steps.nightly.outputs.{name}-ok" in s["if"]
        assert int(s["with"]["retention-days"]) >= 30
    assert up["history"][1]["with"]["path"].rstrip("/") == "history"
    assert up["calibration"][1]["with"]["path"] == "calibration.json"
    assert "--history history" in st[nightly[0]]["run"] and "--calibration calibration.json" in st[nightly[0]]["run"]


# -- ci/pr-ab.sh --------------------------------------------------------------------------------


def git(repo: Path, *args) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}
    return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture()
def pr_repo(tmp_path):
    """main: A-B; feature: A-C (checked out). The merge base is A."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for name in ("A", "B"):
        (repo / name).write_text(name)
        git(repo, "add", name)
        git(repo, "commit", "-q", "-m", name)
    a = git(repo, "rev-parse", "HEAD~1")
    git(repo, "checkout", "-q", "-b", "feature", a)
    (repo / "C").write_text("C")
    git(repo, "add", "C")
    git(repo, "commit", "-q", "-m", "C")
    return repo, a


def test_pr_ab_script(pr_repo, tmp_path):
    repo, merge_base = pr_repo
    exe, log = fake_perfbench(tmp_path)
    out, summary = tmp_path / "out.txt", tmp_path / "summary.md"
    env = script_env(tmp_path, PERFBENCH=exe, FAKE_LOG=log, FAKE_RC='{"ab": 1, "render": 1}', GITHUB_OUTPUT=out,
                     GITHUB_STEP_SUMMARY=summary)
    filt = "op=GroupQueryAttention threads=1 cache=warm"
    args = ("--no-fail", "--base-branch", "main", "--suite", "attention", "--filter", filt,
            "--calibration", tmp_path / "missing.json", "-o", "comparison.json")
    r = run_script("pr-ab.sh", *args, env=env, cwd=repo)
    assert r.returncode == 0, r.stdout + r.stderr  # ab's 1 recorded, not fatal with --no-fail
    assert outputs(out) == {"exit-code": "1", "merge-base": merge_base}
    ab, render = calls(log)
    assert ab == ["ab", "--base-rev", merge_base, "--suite", "attention", "--filter", filt,
                  "--format", "json", "-o", "comparison.json"]  # no --calibration: the file is missing
    assert render[:4] == ["render", "comparison.json", "--format", "markdown"]
    # render's 1 is the document's verdict, not a failure to render: the preview is there
    assert "PREVIEW of render" in summary.read_text() and merge_base[:12] in summary.read_text()
    assert "default between-run spread" in r.stdout

    cal = tmp_path / "calibration.json"
    cal.write_text("{}")
    log.unlink()
    r = run_script("pr-ab.sh", "--base-branch", "main", "--calibration", cal, "--head-rev", "HEAD", env=env, cwd=repo)
    assert r.returncode == 1  # without --no-fail the script exits with ab's code
    assert calls(log)[0] == ["ab", "--base-rev", merge_base, "--head-rev", "HEAD", "--suite", "attention",
                             "--calibration", str(cal), "--format", "json", "-o", "comparison.json"]

    env["FAKE_RC"] = '{"ab": 2}'
    assert (repo / "comparison.json").exists()
    r = run_script("pr-ab.sh", "--no-fail", "--base-branch", "main", env=env, cwd=repo)
    assert r.returncode == 2 and outputs(out)["exit-code"] == "2"
    assert not (repo / "comparison.json").exists()  # a stale document from an earlier run is removed
    assert "wrote no comparison document" in summary.read_text()

    r = run_script("pr-ab.sh", "--base-branch", "no-such-branch", env=env, cwd=repo)
    assert r.returncode == 2 and "fetch-depth: 0" in r.stderr


def test_pr_ab_prefers_the_remote_base_branch(pr_repo, tmp_path):
    repo, _ = pr_repo
    git(repo, "update-ref", "refs/remotes/origin/main", git(repo, "rev-parse", "feature~1"))  # origin/main = A
    git(repo, "branch", "-f", "main", "feature")  # a stale local main that would give another answer
    exe, log = fake_perfbench(tmp_path)
    r = run_script("pr-ab.sh", "--base-branch", "main", env=script_env(tmp_path, PERFBENCH=exe, FAKE_LOG=log),
                   cwd=repo)
    assert r.returncode == 0, r.stderr
    assert calls(log)[0][2] == git(repo, "rev-parse", "feature~1") and "origin/main" in r.stdout


# -- ci/fetch-nightly-artifact.sh and ci/nightly.sh ---------------------------------------------

FAKE_GH = textwrap.dedent("""\
    #!{python}
    # a stand-in for the GitHub CLI: `run list` prints FAKE_GH_RUNS; `run download ID` succeeds
    # for the ids in FAKE_GH_HAVE (writing NAME/from-run.txt); every call is logged
    import json, os, sys
    a = sys.argv[1:]
    with open(os.environ["FAKE_GH_LOG"], "a") as f:
        f.write(json.dumps(a) + "\\n")
    if a[:2] == ["api", "repos/" + os.environ.get("FAKE_GH_REPO", "")]:
        print("main")
    elif a[:2] == ["run", "list"]:
        print(os.environ.get("FAKE_GH_RUNS", "[]"))
    elif a[:2] == ["run", "download"]:
        if a[2] not in os.environ.get("FAKE_GH_HAVE", "").split():
            sys.exit("no valid artifacts found to download")
        d = a[a.index("--dir") + 1]
        with open(os.path.join(d, "from-run.txt"), "w") as f:
            f.write(a[2] + " " + a[a.index("--name") + 1])
    else:
        sys.exit("unexpected: " + " ".join(a))
""")


@pytest.fixture()
def fake_gh(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    make_executable(bin_dir / "gh", FAKE_GH.format(python=sys.executable))
    log = tmp_path / "gh-calls.jsonl"
    env = script_env(tmp_path, FAKE_GH_LOG=log, FAKE_GH_REPO=REPO, GH_TOKEN="x")
    env["PATH"] = os.pathsep.join([str(bin_dir), env["PATH"]])
    return env, log


def test_fetch_nightly_artifact_trusts_only_nightly_default_branch_runs(fake_gh, tmp_path):
    env, log = fake_gh
    env["FAKE_GH_RUNS"] = json.dumps([
        {"databaseId": 60, "event": "pull_request", "headBranch": "main", "conclusion": "success"},  # a fork's "main"
        {"databaseId": 50, "event": "schedule", "headBranch": "other", "conclusion": "success"},
        {"databaseId": 45, "event": "schedule", "headBranch": "main", "conclusion": "cancelled"},
        {"databaseId": 40, "event": "schedule", "headBranch": "main", "conclusion": "success"},  # artifact expired
        {"databaseId": 30, "event": "workflow_dispatch", "headBranch": "main", "conclusion": "failure"},
        {"databaseId": 20, "event": "schedule", "headBranch": "main", "conclusion": "success"},
    ])
    env["FAKE_GH_HAVE"] = "60 50 45 30 20"
    dest = tmp_path / "dest"
    r = run_script("fetch-nightly-artifact.sh", "--repo", REPO, "--name", "history", "--dest", dest, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (dest / "from-run.txt").read_text() == "30 history"
    gh_calls = calls(log)
    assert gh_calls[0][:2] == ["api", f"repos/{REPO}"]  # the default branch, asked of GitHub
    listed = gh_calls[1]
    assert listed[:2] == ["run", "list"]
    for flag, value in (("--workflow", "perfbench-nightly.yml"), ("--branch", "main"), ("--status", "completed"),
                        ("--repo", REPO)):
        assert listed[listed.index(flag) + 1] == value
    assert [c[2] for c in gh_calls if c[:2] == ["run", "download"]] == ["40", "30"]


def test_fetch_nightly_artifact_none_is_fine(fake_gh, tmp_path):
    env, log = fake_gh
    env["FAKE_GH_RUNS"] = json.dumps([{"databaseId": 9, "event": "pull_request", "headBranch": "main",
                                       "conclusion": "success"}])
    dest = tmp_path / "dest"
    r = run_script("fetch-nightly-artifact.sh", "--repo", REPO, "--branch", "main", "--name", "calibration",
                   "--dest", dest, env=env)
    assert r.returncode == 0 and "::notice::" in r.stdout
    assert not any(c[:2] == ["run", "download"] for c in calls(log)) and not (dest / "from-run.txt").exists()


def test_nightly_script(fake_gh, tmp_path):
    env, _ = fake_gh
    exe, log = fake_perfbench(tmp_path)
    out, summary = tmp_path / "out.txt", tmp_path / "summary.md"
    env.update(PERFBENCH=str(exe), FAKE_LOG=str(log), FAKE_RC='{"run": 1}', GITHUB_OUTPUT=str(out),
               GITHUB_STEP_SUMMARY=str(summary), GITHUB_REF_NAME="main", FAKE_GH_HAVE="20",
               FAKE_GH_RUNS=json.dumps([{"databaseId": 20, "event": "schedule", "headBranch": "main",
                                         "conclusion": "success"}]))
    work = tmp_path / "work"
    work.mkdir()
    r = run_script("nightly.sh", "--fetch", "--repo", REPO, "--history", "history",  # the default branch: asked
                   "--calibration", "calibration.json", "--calibrate-filter", "op=Softmax", env=env, cwd=work)
    assert r.returncode == 0, r.stdout + r.stderr  # a failed cell is recorded; the night goes on
    assert (work / "history" / "from-run.txt").read_text() == "20 history"  # yesterday's, carried over
    db = f"sqlite:///{work / 'history' / 'results.db'}"
    assert [c[:2] for c in calls(log)] == [["run", "--suite"], ["show", "latest"], ["calibrate", "--suite"],
                                           ["calibration", "export"]]
    run, _, calibrate, export = calls(log)
    assert run == ["run", "--suite", "attention", "--db", db]
    assert calibrate == ["calibrate", "--suite", "attention", "--filter", "op=Softmax", "--db", db]
    assert export == ["calibration", "export", "-o", "calibration.json", "--db", db]
    assert outputs(out) == {"run-exit-code": "1", "history-ok": "true", "calibration-ok": "true"}
    assert "PREVIEW of show latest" in summary.read_text()

    out.unlink()
    env["FAKE_RC"] = '{"run": 2}'
    r = run_script("nightly.sh", "--history", "history", env=env, cwd=work)
    assert r.returncode == 2 and outputs(out) == {"run-exit-code": "2"}  # history-ok unset: no upload

    for args in (("--fetch", "--repo", REPO), ("--branch", "main")):  # a dispatch on another branch
        r = run_script("nightly.sh", *args, env={**env, "GITHUB_REF_NAME": "feature"}, cwd=work)
        assert r.returncode == 2 and "only from the default branch" in r.stderr


# -- ci/post-comment.sh, end to end against the fake GitHub -------------------------------------

# A small comparison document written by hand (what `perfbench ab --format json` writes, schema 1):
# one unchanged cell and one regression, so `perfbench render` exits 1 (the verdict) and the
# comment must still be posted.


def _change(verdict: str, base: float, head: float) -> dict:
    chg = head / base - 1
    return {"verdict": verdict, "base": base, "head": head, "change": chg, "ci_low": chg - 0.02,
            "ci_high": chg + 0.02, "sigma_b": 0.02, "sigma_source": "default", "n": 8, "p_worse": 0.5,
            "p_worse_m": 0.6, "p_better": 0.5, "p_better_m": 0.6}


def _row(past: int, verdict: str, base: float, head: float) -> dict:
    return {"case_id": f"GroupQueryAttention.past={past}", "op": "GroupQueryAttention",
            "params": {"heads": 32, "kv_heads": 8, "head_size": 128, "past": past, "kv": "shared"},
            "dtype": "f32", "threads": 1, "device": "cpu", "cache": "warm", "spin": "off", "verdict": verdict,
            "why": "", "abs": _change(verdict, base, head), "ratio": None,
            "numerics": {"base_status": "ok", "head_status": "ok", "base_err": 1e-7, "head_err": 1e-7, "tol": 1e-5}}


COMPARISON_DOC = {
    "perfbench_comparison": 1, "schema_version": 1, "kind": "ab", "created_at": "2026-11-30T01:00:00+00:00",
    "suite": "attention", "filters": ["op=GroupQueryAttention threads=1 cache=warm"],
    "base": {"label": "base", "ref": OTHER[:12], "git_sha": OTHER, "run_id": None, "build_id": "b1",
             "source_hash": "s1"},
    "head": {"label": "head", "ref": SHA[:12], "git_sha": SHA, "run_id": None, "build_id": "b2", "source_hash": "s2"},
    "host": {"hostname": "runner", "host_class": "EPYC | 4 cores | Linux", "cpu_model": "AMD EPYC", "cores": 4,
             "load_avg": [0.5, 0.4, 0.3], "ort_version": "1.31.1", "compiler": "gcc 13", "flags": ["-O3"],
             "isa": "avx2", "os": "Linux"},
    "settings": {"min_effect": 0.03, "q": 0.05, "replicates": 8, "mode": "interleaved"},
    "calibration": {"source": "default", "calibration_id": None, "measured_at": None, "age_s": None,
                    "host_class": None, "rounds": None, "default_sigma": 0.02, "cells_calibrated": 0,
                    "cells_default": 2},
    "summary": {"numerics_broke": 0, "regression": 1, "possible": 0, "improvement": 0, "unchanged": 1,
                "not_comparable": 0},
    "exit_code": 1,
    "rows": [_row(128, "unchanged", 100_000.0, 100_500.0), _row(1024, "regression", 600_000.0, 720_000.0)],
    "notes": [],
    "cannot_catch": [],
}

RENDER_SHIM = textwrap.dedent("""\
    #!{python}
    # `perfbench render` stand-in (the real one validates far more); everything else is the real CLI
    import json, os, sys
    a = sys.argv[1:]
    if a[:1] == ["render"]:
        doc = json.load(open(a[1]))
        if doc.get("perfbench_comparison") != 1 or doc.get("schema_version") != 1:
            print("error: unknown comparison schema_version", repr(doc.get("schema_version")), file=sys.stderr)
            sys.exit(2)
        with open(a[a.index("-o") + 1], "w") as f:
            f.write("## perfbench A/B\\n\\nrendered {{}} rows\\n".format(len(doc["rows"])))
        sys.exit(doc["exit_code"])  # like render: the document's verdict
    os.execv(sys.executable, [sys.executable, "-m", "perfbench.cli.main", *a])
""")


@pytest.fixture()
def github():
    with serve(FakeGitHub()) as state:
        yield state


def artifact(tmp_path: Path, doc: dict | None) -> Path:
    d = tmp_path / "pr-artifact"
    d.mkdir(exist_ok=True)
    if doc is not None:
        (d / "comparison.json").write_text(json.dumps(doc))
    return d


def post(github, tmp_path, perfbench: str, sha=SHA, *extra, **env_extra):
    env = script_env(tmp_path, PERFBENCH=perfbench, GITHUB_TOKEN=TOKEN, GITHUB_API_URL=github.api_url, **env_extra)
    return run_script("post-comment.sh", "--repo", REPO, "--sha", sha, *extra, tmp_path / "pr-artifact", env=env)


def test_post_comment_end_to_end_with_real_render(github, tmp_path):
    github.comments[7] = []
    github.add_pull(7, SHA, owner="forker", branch="main")
    artifact(tmp_path, COMPARISON_DOC)
    r = post(github, tmp_path, f"{sys.executable} -m perfbench.cli.main", SHA, "--head-branch", "main",
             "--head-owner", "forker")
    assert r.returncode == 0, r.stdout + r.stderr  # render exits 1 (a regression): posted all the same
    assert len(github.comments[7]) == 1
    body = github.comments[7][0]["body"]
    assert body.endswith(MARKER) and "regression" in body and "past\\=1024" in body
    assert TOKEN not in r.stdout + r.stderr
    for bad in (dict(COMPARISON_DOC, schema_version=2), dict(COMPARISON_DOC, rows=[{"case_id": 1}])):
        artifact(tmp_path, bad)
        n = len(github.requests)
        r = post(github, tmp_path, f"{sys.executable} -m perfbench.cli.main")
        assert r.returncode == 2 and "rejected" in r.stdout, r.stdout + r.stderr
        assert len(github.requests) == n  # rejected before anything is sent


def test_post_comment_plumbing(github, tmp_path):
    shim = make_executable(tmp_path / "perfbench-shim", RENDER_SHIM.format(python=sys.executable))
    github.comments[7] = []
    github.comments[999] = []
    github.add_pull(7, SHA, owner="forker", branch="main")
    github.add_pull(999, OTHER, branch="decoy")
    # the document names another PR: it must never be used
    decoy = dict(COMPARISON_DOC, pr=999, pull_request={"number": 999}, head={"rev": SHA, "pr": 999})
    artifact(tmp_path, decoy)
    summary = tmp_path / "summary.md"
    run_url = "https://github.example/octo-org/kernels/actions/runs/12345"
    r = post(github, tmp_path, str(shim), SHA, "--head-branch", "main", "--head-owner", "forker", "--run-url", run_url,
             GITHUB_STEP_SUMMARY=summary)
    assert r.returncode == 0, r.stdout + r.stderr
    assert github.comments[999] == [] and len(github.comments[7]) == 1
    body = github.comments[7][0]["body"]
    assert body.startswith("## perfbench A/B") and run_url in body and SHA[:12] in body and body.endswith(MARKER)
    assert "comment for #7" in summary.read_text()
    assert TOKEN not in r.stdout + r.stderr
    pulls_queries = [q["path"] for q in github.requests if "/pulls" in q["path"]]
    assert pulls_queries[0].endswith("/pulls?state=open&head=forker%3Amain&per_page=100")

    # a second PR run: the same comment is updated, not a second one; empty head fields are ignored
    r = post(github, tmp_path, str(shim), SHA, "--head-branch", "", "--head-owner", "")
    assert r.returncode == 0, r.stderr
    assert len(github.comments[7]) == 1 and "updated comment" in r.stdout

    # the PR was pushed to since: its head is no longer SHA -> nothing posted, not a failure
    github.pulls[0]["head"]["sha"] = OTHER
    n = len(github.requests)
    r = post(github, tmp_path, str(shim))
    assert r.returncode == 0 and "::notice::no single open pull request" in r.stdout
    assert not [q for q in github.requests[n:] if q["method"] in ("POST", "PATCH")]
    github.pulls[0]["head"]["sha"] = SHA

    # GitHub refuses -> exit 5, nothing posted, the token never printed
    github.fail[("GET", "pulls")] = [403]
    github.fail_body = {"message": f"nope {TOKEN}"}
    r = post(github, tmp_path, str(shim))
    assert r.returncode == 5 and TOKEN not in r.stdout + r.stderr

    # a document this perfbench cannot read -> exit 2 before anything is sent
    artifact(tmp_path, dict(COMPARISON_DOC, schema_version=2))
    n = len(github.requests)
    r = post(github, tmp_path, str(shim))
    assert r.returncode == 2 and "rejected" in r.stdout and len(github.requests) == n

    # no artifact (the PR run failed before measuring): nothing to post, not a failure
    (tmp_path / "pr-artifact" / "comparison.json").unlink()
    r = post(github, tmp_path, str(shim))
    assert r.returncode == 0 and "nothing to post" in r.stdout and len(github.requests) == n

    # a symlink planted in the artifact is not followed
    (tmp_path / "pr-artifact" / "comparison.json").symlink_to(tmp_path / "summary.md")
    r = post(github, tmp_path, str(shim))
    assert r.returncode == 2 and "not a regular file" in r.stderr and len(github.requests) == n
