"""Persistent worker processes: imports preloaded, one cell at a time, with a timeout. A crash
(segfault, abort) or a hang becomes that cell's status, attributed to the side (ours/ORT) whose
phase was running, and a fresh worker takes the next cell."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import traceback
from dataclasses import asdict

from perfbench.timing.protocol import CellOutcome, CellSpec

_CTX = mp.get_context("spawn")
READY_TIMEOUT_S = 180.0


def _worker_main(conn, build_info: dict) -> None:
    # the parent owns Ctrl-C; a worker is stopped by the parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        from perfbench.kernels_ffi import BuildInfo, load
        from perfbench.timing.protocol import Harness

        lib = load(BuildInfo(**build_info))
        harness = Harness(lib, progress=lambda phase, **facts: conn.send(("phase", phase, facts)))
        conn.send(("ready", {"isa": lib.isa_active, "pid": os.getpid()}))
    except BaseException:  # noqa: BLE001
        conn.send(("fatal", traceback.format_exc()))
        return
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "stop":
            return
        if msg[0] == "cell":
            try:
                out = harness.measure(CellSpec(**msg[1]))
                conn.send(("done", out.to_dict()))
            except Exception as e:  # noqa: BLE001 - an unsupported case is data (house rule 2)
                conn.send(("error", f"{e.__class__.__name__}: {e}", traceback.format_exc()))


def _side_of(phase: str) -> str:
    """Which side a phase belongs to: "ours: ...", "ort: ...", else the harness."""
    side = phase.split(":", 1)[0].strip()
    return side if side in ("ours", "ort") else "harness"


class Worker:
    """The parent's handle on one worker process (restarted after a crash or timeout)."""

    def __init__(self, build_info: dict):
        self.build_info = build_info
        self.proc = None
        self.conn = None
        self.info = {}

    def start(self) -> None:
        parent, child = _CTX.Pipe()
        self.proc = _CTX.Process(target=_worker_main, args=(child, self.build_info), daemon=True,
                                 name="perfbench-worker")
        self.proc.start()
        child.close()
        self.conn = parent
        if not parent.poll(READY_TIMEOUT_S):
            self.kill()
            raise RuntimeError("worker did not start within %.0f s" % READY_TIMEOUT_S)
        try:
            kind, payload = parent.recv()
        except EOFError:
            code = self.proc.exitcode
            self.kill()
            raise RuntimeError(f"worker died while starting (exit code {code})") from None
        if kind != "ready":
            self.kill()
            raise RuntimeError(f"worker failed to start:\n{payload}")
        self.info = payload

    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(timeout=10)
        if self.conn is not None:
            self.conn.close()
        self.proc, self.conn = None, None

    def stop(self) -> None:
        if self.alive():
            try:
                self.conn.send(("stop",))
                self.proc.join(timeout=5)
            except (OSError, BrokenPipeError):
                pass
        self.kill()

    def measure(self, spec: CellSpec, timeout_s: float, on_phase=None) -> CellOutcome:
        """Run one cell; never raises for what happens inside the worker."""
        if not self.alive():
            self.start()
        self.conn.send(("cell", asdict(spec)))
        deadline = time.monotonic() + timeout_s
        phase = "harness: starting"
        facts: dict = {}
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                return _failed("timeout", phase, f"cell did not finish within {timeout_s:.0f} s (during {phase})",
                               facts)
            try:
                ready = self.conn.poll(min(left, 1.0))
            except (OSError, EOFError):
                ready = True
            if not ready:
                if not self.proc.is_alive():
                    return self._crashed(phase, facts)
                continue
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                return self._crashed(phase, facts)
            if msg[0] == "phase":
                phase = msg[1]
                facts.update(msg[2])
                if on_phase:
                    on_phase(phase)
            elif msg[0] == "done":
                return CellOutcome(**msg[1])
            elif msg[0] == "error":
                # an exception in the harness (not in a timed side: those become statuses there)
                return _failed("error", phase, f"{msg[1]} (during {phase})", facts)

    def _crashed(self, phase: str, facts: dict) -> CellOutcome:
        self.proc.join(timeout=5)
        code = self.proc.exitcode
        self.kill()
        how = f"signal {-code} ({signal.Signals(-code).name})" if code is not None and code < 0 else f"exit {code}"
        return _failed("crashed", phase, f"worker died with {how} during {phase}", facts)


def _failed(status: str, phase: str, message: str, facts: dict | None = None) -> CellOutcome:
    """The outcome of a cell whose worker failed. The status goes to the side whose phase was
    running; a harness failure counts against ours (it is our tool failing the cell). When ORT
    failed after our numerics were checked, ours keeps its verdict judged at the floor (where
    ORT cannot run the case, tol = floor), so an ORT failure never fails our cell."""
    facts = facts or {}
    out = CellOutcome(ort_dtype=facts.get("ort_dtype", ""))
    side = _side_of(phase)
    if side == "harness":
        side = "ours"
    setattr(out, f"{side}_status", status)
    setattr(out, f"{side}_message", message)
    if side == "ort" and "ours_err" in facts:
        out.err_ours, out.tol, out.floor = facts["ours_err"], facts["floor"], facts["floor"]
        if not out.err_ours <= out.tol:
            out.ours_status = "mismatch"
            out.ours_message = f"numerics: err(ours)={out.err_ours:.3g} > floor {out.tol:g} (ORT could not be compared)"
        else:
            out.ours_message = f"numerics judged at the floor: ORT {status} before it could be compared"
    else:
        other = "ort" if side == "ours" else "ours"
        setattr(out, f"{other}_status", "error")
        setattr(out, f"{other}_message", f"not measured: the worker {status} during {phase}")
    return out
