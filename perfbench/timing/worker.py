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
SLOT_BYTES = 256
SLICE_FIELDS = {"process": 0, "rep_offset": 0, "timing_only": False}  # CellSpec's, with their defaults


def _worker_main(conn, build_info: dict, sides: dict | None = None, slot=None) -> None:
    """sides (label -> build info), when given: every cell is measured with each of these
    builds of our library, side by side (`perfbench ab`), and answered as label -> outcome.
    slot: shared memory the worker writes its current phase into (read by the parent only if
    the worker dies), so that blocks start without a message to the parent."""
    # the parent owns Ctrl-C; a worker is stopped by the parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        from perfbench.kernels_ffi import BuildInfo, load
        from perfbench.timing.protocol import Harness

        lib = load(BuildInfo(**build_info))
        libs = {label: load(BuildInfo(**info)) for label, info in (sides or {}).items()}
        def mark(phase: str) -> None:
            if slot is not None:
                slot.value = phase.encode()[:SLOT_BYTES - 1]

        def progress(phase: str, **facts) -> None:
            mark(phase)
            conn.send(("phase", phase, facts))

        harness = Harness(lib, progress=progress, mark=mark)
        conn.send(("ready", {"isa": lib.isa_active, "pid": os.getpid(),
                             "sides": {label: x.isa_active for label, x in libs.items()}}))
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
            mark("harness: starting")  # the slot never carries the previous cell's phase
            try:
                if libs:
                    outs = harness.measure_sides(CellSpec(**msg[1]), libs)
                    conn.send(("done", {label: o.to_dict() for label, o in outs.items()}))
                else:
                    conn.send(("done", harness.measure(CellSpec(**msg[1])).to_dict()))
            except Exception as e:  # noqa: BLE001 - an unsupported case is data (house rule 2)
                conn.send(("error", f"{e.__class__.__name__}: {e}", traceback.format_exc()))


def _foreign_main(conn, checkout: str, build_info: dict, slot=None) -> None:
    """A worker running another checkout's perfbench (its harness and op files): `perfbench ab`
    on an op whose native interface changed between base and head measures each side this way."""
    import importlib
    import sys

    for name in [n for n in sys.modules if n == "perfbench" or n.startswith("perfbench.")]:
        del sys.modules[name]
    sys.path.insert(0, checkout)
    import inspect

    main = importlib.import_module("perfbench.timing.worker")._worker_main
    if "slot" in inspect.signature(main).parameters:
        main(conn, build_info, None, slot)
    else:  # a checkout whose worker predates the phase slot
        main(conn, build_info)


def _side_of(phase: str, labels=("ours",)) -> str:
    """Which side a phase belongs to: "ours: ..." (or a build's label), "ort: ...", else the harness."""
    side = phase.split(":", 1)[0].strip()
    return side if side == "ort" or side in labels else "harness"


class Worker:
    """The parent's handle on one worker process (restarted after a crash or timeout)."""

    def __init__(self, build_info: dict, sides: dict | None = None, checkout: str | None = None):
        self.build_info = build_info
        self.checkout = checkout  # run that checkout's perfbench instead of this one (no sides then)
        self.sides = sides  # label -> build info: measure() answers label -> CellOutcome
        self.proc = None
        self.conn = None
        self.slot = None
        self.info = {}

    def start(self) -> None:
        parent, child = _CTX.Pipe()
        self.slot = _CTX.Array("c", SLOT_BYTES, lock=False)
        target, args = ((_foreign_main, (child, self.checkout, self.build_info, self.slot)) if self.checkout
                        else (_worker_main, (child, self.build_info, self.sides, self.slot)))
        self.proc = _CTX.Process(target=target, args=args, daemon=True,
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

    def measure(self, spec: CellSpec, timeout_s: float, on_phase=None):
        """Run one cell; never raises for what happens inside the worker. Returns a
        CellOutcome, or label -> CellOutcome for a worker with several builds (`sides`)."""
        labels = tuple(self.sides) if self.sides else ("ours",)

        def failed(status, phase, message, facts):
            outs = _failed(status, phase, message, facts, labels)
            return outs if self.sides else outs["ours"]

        if not self.alive():
            self.start()
        d = asdict(spec)
        for k in SLICE_FIELDS:  # sent only when set: a foreign checkout's CellSpec may predate them
            if d[k] == SLICE_FIELDS[k]:
                del d[k]
        self.conn.send(("cell", d))
        deadline = time.monotonic() + timeout_s
        phase = "harness: starting"
        facts: dict = {}
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                phase = self._slot_phase(phase)
                self.kill()
                return failed("timeout", phase, f"cell did not finish within {timeout_s:.0f} s (during {phase})",
                              facts)
            try:
                ready = self.conn.poll(min(left, 1.0))
            except (OSError, EOFError):
                ready = True
            if not ready:
                if not self.proc.is_alive():
                    return self._crashed(phase, facts, failed)
                continue
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                return self._crashed(phase, facts, failed)
            if msg[0] == "phase":
                phase = msg[1]
                facts.update(msg[2])
                if on_phase:
                    on_phase(phase)
            elif msg[0] == "done":
                if self.sides:
                    return {label: CellOutcome(**d) for label, d in msg[1].items()}
                return CellOutcome(**msg[1])
            elif msg[0] == "error":
                # an exception in the harness (not in a timed side: those become statuses there)
                phase = self._slot_phase(phase)
                return failed("error", phase, f"{msg[1]} (during {phase})", facts)

    def _slot_phase(self, phase: str) -> str:
        """The worker's own last phase (written without a message), else the last one sent."""
        try:
            got = self.slot.value.decode(errors="replace") if self.slot is not None else ""
        except (OSError, ValueError):
            got = ""
        return got or phase

    def _crashed(self, phase: str, facts: dict, failed):
        phase = self._slot_phase(phase)
        self.proc.join(timeout=5)
        code = self.proc.exitcode
        self.kill()
        how = f"signal {-code} ({signal.Signals(-code).name})" if code is not None and code < 0 else f"exit {code}"
        return failed("crashed", phase, f"worker died with {how} during {phase}", facts)


def _failed(status: str, phase: str, message: str, facts: dict | None = None, labels=("ours",)) -> dict:
    """The outcomes (label -> CellOutcome) of a cell whose worker failed. The status goes to the
    side whose phase was running; a harness failure counts against every build of ours (it is
    our tool failing the cell). When ORT failed after our numerics were checked, each build
    keeps its verdict judged at the floor (where ORT cannot run the case, tol = floor), so an
    ORT failure never fails our cell. A build that did not fail is "error: not measured"."""
    facts = facts or {}
    side = _side_of(phase, labels)
    outs = {}
    for label in labels:
        out = CellOutcome(ort_dtype=facts.get("ort_dtype", ""))
        if side == "ort":
            out.ort_status, out.ort_message = status, message
            err = facts.get(f"{label}_err")
            if err is not None:
                out.err_ours, out.tol, out.floor = err, facts["floor"], facts["floor"]
                if not out.err_ours <= out.tol:
                    out.ours_status = "mismatch"
                    out.ours_message = (f"numerics: err(ours)={out.err_ours:.3g} > floor {out.tol:g} "
                                        "(ORT could not be compared)")
                else:
                    out.ours_message = f"numerics judged at the floor: ORT {status} before it could be compared"
            else:
                out.ours_status, out.ours_message = "error", f"not measured: the worker {status} during {phase}"
        elif side == "harness" or side == label:
            out.ours_status, out.ours_message = status, message
            out.ort_status, out.ort_message = "error", f"not measured: the worker {status} during {phase}"
        else:  # another build failed
            out.ours_status, out.ours_message = "error", f"not measured: the worker {status} during {phase}"
            out.ort_status, out.ort_message = "error", f"not measured: the worker {status} during {phase}"
        outs[label] = out
    return outs
