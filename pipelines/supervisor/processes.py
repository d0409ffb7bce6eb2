"""The supervisor's children as processes: start them in their own group, stop them in order.

Every child is started with PR_SET_PDEATHSIG, so a supervisor that is itself killed takes its
children with it (a restarted supervisor never finds a second set running), and in its own
process group, so a zombie freeze or a stop reaches the driver and its Spark JVM together.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when the supervisor's thread that started it dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


# Secrets the children never need: the dashboard's token stays with the dashboard.
WITHHELD = ("DASHBOARD_TOKEN",)


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a job or the simulator starts with: the supervisor's, minus WITHHELD."""
    return {k: v for k, v in (os.environ if env is None else env).items() if k not in WITHHELD}


def spawn(argv: list[str], log_path: Path) -> subprocess.Popen:
    log = open(log_path, "ab")
    try:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                preexec_fn=_die_with_parent, start_new_session=True, env=child_env())
    finally:
        log.close()


@dataclass
class Child:
    job: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    restarts: int = 0
    restart_at: float | None = None
    status: str = "starting"
    detail: str = ""
    expected_exit: bool = False  # killed on purpose (crash fault): restart after the plain delay
    # a standby slot that starts only after its active's first batch with rows: at the start and
    # after a takeover (on two cores its JVM start and rehearsal would share the CPU with that batch)
    after_first_batch: bool = False


def standby_waits(slot: Child, first_batch_pending: bool, now: float) -> bool:
    """Whether an empty standby slot must not start yet (monotonic `now`). At the start and after a
    takeover it waits for its active's first batch with rows (`first_batch_pending`, which has its
    cap); otherwise until `restart_at`, a dead standby's backoff, if any."""
    if slot.after_first_batch:
        return first_batch_pending
    return slot.restart_at is not None and now < slot.restart_at


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def drain_group(pgid: int, deadline: float) -> None:
    """Wait for every process of the group to exit; SIGKILL what is left at the deadline."""
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if group_alive(pgid):
        os.killpg(pgid, signal.SIGKILL)
        for _ in range(50):
            if not group_alive(pgid):
                break
            time.sleep(0.1)


def send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def stop_all(procs: list[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM each (jobs stop their queries between batches), wait, SIGKILL stragglers and
    whatever of their groups (the Spark JVM) outlives them."""
    for proc in procs:
        send(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for proc in procs:
        drain_group(proc.pid, deadline)


def last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return lines[-1][:200] if lines else "no output"


def last_error(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "no log"
    errors = [ln for ln in lines if "Exception" in ln or "Error" in ln or "error" in ln]
    return (errors[-1] if errors else (lines[-1] if lines else "no output")).strip()[:300]
