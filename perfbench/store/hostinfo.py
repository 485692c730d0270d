"""Fingerprints: this host, its class, the checkout, the environment. pyperf supplies the host
metadata and the tuning checks (`python -m pyperf system show`)."""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from perfbench.timing.caches import cache_bytes


@dataclass
class HostFacts:
    hostname: str
    cpu_model: str
    cores: int
    os_family: str
    cpu_flags: list = field(default_factory=list)
    l2_bytes: int | None = None
    l3_bytes: int | None = None
    memory_bytes: int | None = None
    meta: dict = field(default_factory=dict)

    @property
    def class_key(self) -> str:
        """CPU model + core count + OS family (CONTRACTS §1): not the hostname."""
        return f"{self.cpu_model} | {self.cores} cores | {self.os_family}"


def _cpuinfo() -> dict:
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # first processor only
                k, _, v = line.partition(":")
                info[k.strip()] = v.strip()
    except OSError:
        pass
    return info


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def host_facts() -> HostFacts:
    ci = _cpuinfo()
    model = ci.get("model name") or platform.processor() or platform.machine()
    fam, mod = ci.get("cpu family"), ci.get("model")
    if fam is not None and mod is not None:
        # VMs often hide the marketing name ("AMD EPYC"): family/model tell generations apart
        model = f"{model} (family {fam} model {mod})"
    try:
        import pyperf

        meta = pyperf.Run([1.0]).get_metadata()
        meta = {k: v for k, v in meta.items() if k not in ("date", "uptime", "mem_max_rss", "load_avg_1min")}
    except Exception:  # noqa: BLE001 - metadata is provenance, never fatal
        meta = {}
    mem = None
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    return HostFacts(
        hostname=socket.gethostname(),
        cpu_model=model,
        cores=usable_cores(),
        os_family=platform.system(),
        cpu_flags=sorted(ci.get("flags", "").split()),
        l2_bytes=cache_bytes(2),
        l3_bytes=cache_bytes(3),
        memory_bytes=mem,
        meta=meta,
    )


def load_average() -> list:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def git_info(path: Path | None = None) -> dict:
    """sha, branch and dirty flag of the checkout (recorded only; None outside git)."""
    cwd = str(path or Path(__file__).resolve().parents[2])

    def git(*args):
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None

    try:
        sha = git("rev-parse", "HEAD")
    except OSError:
        return {"sha": None, "branch": None, "dirty": None}
    if sha is None:
        return {"sha": None, "branch": None, "dirty": None}
    branch = os.environ.get("GITHUB_HEAD_REF") or git("rev-parse", "--abbrev-ref", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"sha": sha, "branch": branch, "dirty": bool(status)}


def versions() -> dict:
    import numpy
    import onnx
    import onnxruntime

    from perfbench import __version__

    return {
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "perfbench": __version__,
    }


def tuning_advice() -> list[str]:
    """The 'Advices' and 'Errors' of `python -m pyperf system show` (empty when tuned or when
    pyperf cannot tell)."""
    try:
        r = subprocess.run([sys.executable, "-m", "pyperf", "system", "show"], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    out, section, advice = r.stdout, None, []
    for line in out.splitlines():
        if re.fullmatch(r"=+", line.strip()):
            continue
        if line.strip() in ("Advices", "Errors"):
            section = line.strip()
            continue
        if line.strip() in ("System state", "Warnings") or line.startswith("Run "):
            section = None
            continue
        if section and line.strip():
            advice.append(line.strip())
    return advice
