"""The supervisor: runs the jobs as child processes, restarts them, and carries out faults.

    python -m pipelines.supervisor [--jobs fraud,usage] [--with-simulator] [--simulator-args "..."]

It is the one place where `crash`, `broker-down` and `zombie` happen; the jobs execute their own
in-batch faults (`crash-after-sink`, `sink-down`, `task-failure`) and the simulator its own
(`late-burst`, `bad-input`, ...), all claimed from the store's command table.

Every child is started from the main thread with PR_SET_PDEATHSIG, so a supervisor that is itself
killed takes its children with it (a restarted supervisor never finds a second set running).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from infra import broker
from infra.config import Settings, load
from infra.topics import ensure_topics
from pipelines import commands
from pipelines.commands import now_ms
from pipelines.store import connect

SUPERVISOR_FAULTS = ("crash", "broker-down", "zombie")
JOB_MODULES = {"fraud": "pipelines.fraud", "usage": "pipelines.usage", "simulator": "simulator"}
QUICK_EXIT_S = 30.0      # a child that dies sooner than this counts towards back-off
STOP_GRACE_S = 30.0      # SIGTERM, then this long, then SIGKILL
ZOMBIE_TIMEOUT_S = 120.0


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when the supervisor's thread that started it dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def backoff_delay(base: float, cap: float, quick_failures: int) -> float:
    """Restart delay: the base delay, doubled for each quick failure in a row, capped."""
    return min(cap, base * (2 ** max(0, quick_failures)))


@dataclass
class Child:
    job: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    restarts: int = 0
    quick_failures: int = 0
    restart_at: float | None = None
    status: str = "starting"
    detail: str = ""
    expected_exit: bool = False  # killed on purpose (crash fault): restart after the plain delay


@dataclass
class Zombie:
    job: str
    proc: subprocess.Popen
    command_id: int
    resume_at: float
    log_path: Path
    resumed_at: float | None = None
    resumed_ms: int = 0
    deadline: float = 0.0


@dataclass
class PendingRecovery:
    job: str
    fault: str
    killed_at_ms: int
    command_id: int | None = None


@dataclass
class Supervisor:
    s: Settings
    jobs: list[str]
    job_args: dict[str, list[str]] = field(default_factory=dict)
    children: dict[str, Child] = field(default_factory=dict)
    zombies: list[Zombie] = field(default_factory=list)
    recoveries: list[PendingRecovery] = field(default_factory=list)
    stopping: bool = False

    def __post_init__(self):
        self.db = connect(s=self.s)
        self.log_dir = self.s.run_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for job in self.jobs:
            argv = [sys.executable, "-m", JOB_MODULES[job], *self.job_args.get(job, [])]
            known = self.db["job_status"].get(job) if self.db["job_status"].count_where("job = ?", [job]) else {}
            self.children[job] = Child(job, argv, self.log_dir / f"{job}.log", restarts=known.get("restarts") or 0)
        self._last_status = 0.0
        self._topics_ready = False
        self._auditor: threading.Thread | None = None
        self._broker_fault: threading.Thread | None = None

    # -- children -------------------------------------------------------------------------
    def _spawn(self, argv: list[str], log_path: Path) -> subprocess.Popen:
        log = open(log_path, "ab")
        try:
            # Own process group: a zombie freeze stops the driver and its Spark JVM together.
            return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    preexec_fn=_die_with_parent, start_new_session=True,
                                    env=os.environ.copy())
        finally:
            log.close()

    def start(self, child: Child) -> None:
        child.proc = self._spawn(child.argv, child.log_path)
        child.started_at = time.monotonic()
        child.restart_at = None
        child.status = "running"
        child.detail = f"started pid {child.proc.pid}"
        self._write_status(child)

    def reap(self) -> None:
        for child in self.children.values():
            if child.proc is None or child.proc.poll() is None:
                continue
            code = child.proc.returncode
            lived = time.monotonic() - child.started_at
            if child.expected_exit:
                delay = self.s.restart_delay_seconds
                child.quick_failures = 0
            else:
                child.quick_failures = child.quick_failures + 1 if lived < QUICK_EXIT_S else 0
                delay = backoff_delay(self.s.restart_delay_seconds, self.s.restart_backoff_max_seconds,
                                      child.quick_failures - 1)
            child.expected_exit = False
            child.proc = None
            child.restarts += 1
            child.restart_at = time.monotonic() + delay
            child.status = "restarting"
            child.detail = (f"exited with code {code} after {lived:.0f} s ({_last_line(child.log_path)}); "
                            f"restart in {delay:.0f} s")
            print(f"supervisor: {child.job} {child.detail}", flush=True)
            self._write_status(child)

    def start_due(self) -> None:
        for child in self.children.values():
            if child.proc is None and (child.restart_at is None or time.monotonic() >= child.restart_at):
                if not self._kafka_answers():
                    child.status, child.detail = "waiting", "waiting for Kafka to answer"
                    child.restart_at = time.monotonic() + 1.0
                    self._write_status(child)
                    continue
                if not self._topics_ready:
                    ensure_topics(s=self.s)
                    self._topics_ready = True
                self.start(child)

    def _kafka_answers(self) -> bool:
        host, _, port = self.s.kafka_bootstrap.split(",")[0].rpartition(":")
        return bool(broker.api_versions(host, int(port), timeout=1.0))

    # -- status -----------------------------------------------------------------------------
    def _last_batch(self, job: str) -> int | None:
        pattern = "usage-%" if job == "usage" else job
        row = self.db.execute("SELECT max(batch_id) FROM batch_progress WHERE query LIKE ?", [pattern]).fetchone()
        return row[0] if row else None

    def _write_status(self, child: Child) -> None:
        pid = child.proc.pid if child.proc else None
        self.db["job_status"].upsert({
            "job": child.job, "status": child.status, "pid": pid, "restarts": child.restarts,
            "last_batch": self._last_batch(child.job) if child.job != "simulator" else None,
            "started_at": int((time.time() - (time.monotonic() - child.started_at)) * 1000) if pid else None,
            "updated_at": now_ms(), "detail": child.detail}, pk="job")

    def refresh_status(self) -> None:
        if time.monotonic() - self._last_status < 1.0:
            return
        self._last_status = time.monotonic()
        for child in self.children.values():
            self._write_status(child)

    # -- commands ---------------------------------------------------------------------------
    def recover_interrupted_commands(self) -> None:
        """Commands a previous supervisor claimed but never finished: say so, never re-run them."""
        marks = ",".join("?" for _ in SUPERVISOR_FAULTS)
        for row in self.db.execute(f"SELECT id FROM commands WHERE status = 'started' AND kind IN ({marks})",
                                   list(SUPERVISOR_FAULTS)).fetchall():
            commands.finish(self.db, row[0], "interrupted: the supervisor stopped before it finished", ok=False)

    def take_commands(self) -> None:
        for cmd in commands.claim(self.db, SUPERVISOR_FAULTS):
            try:
                handler = {"crash": self.do_crash, "broker-down": self.do_broker_down,
                           "zombie": self.do_zombie}[cmd.kind]
                handler(cmd)
            except Exception as exc:  # a failed fault is recorded, never fatal to the supervisor
                commands.finish(self.db, cmd.id, f"failed: {exc}", ok=False)

    def _target(self, cmd: commands.Command) -> Child:
        job = cmd.job or "usage"
        child = self.children.get(job)
        if child is None:
            raise ValueError(f"job {job!r} is not run by this supervisor (it runs {', '.join(self.children)})")
        if child.proc is None:
            raise ValueError(f"job {job!r} is not running right now ({child.status})")
        return child

    def do_crash(self, cmd: commands.Command) -> None:
        child = self._target(cmd)
        pid = child.proc.pid
        killed_at = now_ms()
        child.expected_exit = True
        os.kill(pid, signal.SIGKILL)
        if child.job != "simulator":
            self.recoveries.append(PendingRecovery(child.job, "crash", killed_at, cmd.id))
        commands.finish(self.db, cmd.id, f"SIGKILL sent to {child.job} driver pid {pid}; "
                                         f"restart in {self.s.restart_delay_seconds:.0f} s")

    def do_broker_down(self, cmd: commands.Command) -> None:
        if self.s.external_bootstrap:
            raise ValueError(f"the broker at {self.s.external_bootstrap} is not ours to stop")
        if self._broker_fault and self._broker_fault.is_alive():
            raise ValueError("the broker is already down for another broker-down command")
        seconds = float(cmd.param("seconds", 10))

        def outage():
            started = time.monotonic()
            broker.down(self.s, quiet=True)
            stopped_after = time.monotonic() - started
            time.sleep(seconds)
            broker.up(self.s, quiet=True)
            commands.finish(self.db, cmd.id, f"broker stopped ({stopped_after:.1f} s to stop), down for "
                                             f"{seconds:.0f} s, answering again")

        # The broker is started detached (its own session), so starting it from a thread is safe.
        self._broker_fault = threading.Thread(target=outage, name="broker-down", daemon=True)
        self._broker_fault.start()

    def do_zombie(self, cmd: commands.Command) -> None:
        """Freeze the running instance, start a replacement, then let the frozen one wake up stale."""
        child = self._target(cmd)
        if child.job == "simulator":
            raise ValueError("zombie applies to the Spark jobs (fraud, usage), not the simulator")
        seconds = float(cmd.param("seconds", 15))
        old = child.proc
        os.killpg(old.pid, signal.SIGSTOP)  # like a long GC pause or a suspended VM
        log_path = self.log_dir / f"{child.job}-zombie-{cmd.id}.log"
        child.proc = None
        self.start(child)  # the replacement takes a newer lease: the frozen one is now stale
        child.detail = f"replacement pid {child.proc.pid} started; pid {old.pid} frozen as a zombie"
        now = time.monotonic()
        self.zombies.append(Zombie(child.job, old, cmd.id, now + seconds, child.log_path,
                                   deadline=now + seconds + ZOMBIE_TIMEOUT_S))
        print(f"supervisor: zombie: froze {child.job} pid {old.pid}, replacement pid {child.proc.pid}", flush=True)

    def tend_zombies(self) -> None:
        for z in list(self.zombies):
            now = time.monotonic()
            if z.resumed_at is None and now >= z.resume_at:
                os.killpg(z.proc.pid, signal.SIGCONT)
                z.resumed_at = now
                z.resumed_ms = now_ms()
                continue
            if z.resumed_at is None:
                continue
            code = z.proc.poll()
            if code is None and now < z.deadline:
                continue
            if code is None:
                z.proc.kill()
                z.proc.wait()
            rejected = self.db.execute("SELECT count(*) FROM rejected_writes WHERE job = ? AND ts >= ?",
                                       [z.job, z.resumed_ms]).fetchone()[0]
            if code == 3 or rejected:
                result = (f"zombie pid {z.proc.pid} woke with a stale epoch: {rejected} write(s) rejected "
                          f"by fencing; it exited with code {code}")
            elif code is None:
                result = f"zombie pid {z.proc.pid} still running after {ZOMBIE_TIMEOUT_S:.0f} s: killed"
            else:
                result = (f"zombie pid {z.proc.pid} was stopped by Spark before it could write "
                          f"(exit code {code}): {_last_error(z.log_path, z.proc.pid)}")
            commands.finish(self.db, z.command_id, result, ok=bool(rejected) or code == 3 or code not in (None, 0))
            self.zombies.remove(z)

    # -- recovery times ---------------------------------------------------------------------
    def detect_recoveries(self) -> None:
        for rec in list(self.recoveries):
            pattern = "usage-%" if rec.job == "usage" else rec.job
            row = self.db.execute("SELECT min(ts) FROM batch_progress WHERE query LIKE ? AND ts > ? "
                                  "AND num_input_rows > 0", [pattern, rec.killed_at_ms]).fetchone()
            if row and row[0]:
                self.db["recoveries"].insert({"job": rec.job, "fault": rec.fault, "killed_at": rec.killed_at_ms,
                                              "recovered_at": row[0],
                                              "seconds": (row[0] - rec.killed_at_ms) / 1000})
                self.recoveries.remove(rec)
            elif now_ms() - rec.killed_at_ms > 600_000:
                self.recoveries.remove(rec)

    # -- live auditor -----------------------------------------------------------------------
    def audit_in_background(self) -> None:
        if self._auditor is not None:
            return
        try:
            from pipelines import audit
        except ImportError:
            return

        def loop():
            db = connect(s=self.s)
            auditor = audit.LiveAuditor(self.s) if hasattr(audit, "LiveAuditor") else None
            while not self.stopping:
                started = time.monotonic()
                try:
                    snap = auditor.snapshot() if auditor else audit.snapshot(self.s)
                    audit.record(db, snap)
                except Exception as exc:  # Kafka down, store busy: try again next round
                    print(f"supervisor: audit skipped: {exc}", flush=True)
                time.sleep(max(0.5, self.s.audit_interval_seconds - (time.monotonic() - started)))

        self._auditor = threading.Thread(target=loop, name="auditor", daemon=True)
        self._auditor.start()

    # -- lifecycle --------------------------------------------------------------------------
    def run(self) -> None:
        self.recover_interrupted_commands()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        print(f"supervisor: running {', '.join(self.children)} (logs in {self.log_dir})", flush=True)
        while not self.stopping:
            self.reap()
            self.start_due()
            self.take_commands()
            self.tend_zombies()
            self.detect_recoveries()
            self.refresh_status()
            self.audit_in_background()
            time.sleep(0.2)
        self.shutdown()

    def _on_signal(self, *_):
        self.stopping = True

    def shutdown(self) -> None:
        """SIGTERM every child (jobs stop their queries between batches), SIGKILL stragglers."""
        procs = [c.proc for c in self.children.values() if c.proc] + [z.proc for z in self.zombies]
        for z in self.zombies:
            try:
                os.killpg(z.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        for proc in procs:
            _signal(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for proc in procs:  # the child's Spark JVM (same process group) may outlive it by a moment
            _drain_group(proc.pid, deadline)
        for child in self.children.values():
            child.proc, child.status, child.detail = None, "stopped", "supervisor stopped"
            self._write_status(child)
        print("supervisor: stopped", flush=True)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _drain_group(pgid: int, deadline: float) -> None:
    """Wait for every process of the group to exit; SIGKILL what is left at the deadline."""
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _group_alive(pgid):
        os.killpg(pgid, signal.SIGKILL)
        for _ in range(50):
            if not _group_alive(pgid):
                break
            time.sleep(0.1)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _last_line(path: Path) -> str:
    try:
        lines = [l for l in path.read_text(errors="replace").splitlines() if l.strip()]
    except OSError:
        return "no log"
    return lines[-1][:200] if lines else "no output"


def _last_error(path: Path, pid: int) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "no log"
    errors = [l for l in lines if "Exception" in l or "Error" in l or "error" in l]
    return (errors[-1] if errors else (lines[-1] if lines else "no output")).strip()[:300]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.supervisor", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", default="fraud,usage", help="comma-separated jobs to run (fraud, usage)")
    parser.add_argument("--with-simulator", action="store_true", help="also run the simulator")
    for job, example in (("fraud", "--mode microbatch"), ("usage", "--guarantee exactly-once"),
                         ("simulator", "--rate 200")):
        parser.add_argument(f"--{job}-args", default="", help=f'arguments for the {job} job, e.g. "{example}"')
    args = parser.parse_args(argv)
    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    unknown = [j for j in jobs if j not in ("fraud", "usage")]
    if unknown:
        parser.error(f"unknown job {unknown[0]!r}: choose from fraud, usage")
    if args.with_simulator:
        jobs.append("simulator")
    job_args = {job: shlex.split(getattr(args, f"{job}_args")) for job in JOB_MODULES}
    Supervisor(load(), jobs, job_args).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
