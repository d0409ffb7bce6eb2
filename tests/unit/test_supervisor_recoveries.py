"""Recoveries the supervisor measures when a job exits by itself: attributed to the in-job fault
that just ran for it (crash-after-sink's own kill) or called an `exit`, and how it came back."""
from __future__ import annotations

from types import SimpleNamespace

from controlplane import commands
from controlplane.store import connect
from infra.config import load
from pipelines.supervisor.faults import FaultExecutor


def executor(tmp_path) -> FaultExecutor:
    db = connect(tmp_path / "store.db")
    return FaultExecutor(SimpleNamespace(db=db, s=load()))


def test_an_exit_right_after_crash_after_sink_is_that_fault_and_its_command(tmp_path):
    ex = executor(tmp_path)
    cid = commands.issue(ex.db, "crash-after-sink", "usage", guarantee="at-least-once")
    commands.claim(ex.db, ("crash-after-sink",), "usage")
    commands.finish(ex.db, cid, "SIGKILL after the sink write")
    ex.unplanned_exit("usage", standby=True)
    (rec,) = ex.recoveries
    assert (rec.job, rec.fault, rec.command_id, rec.via) == ("usage", "crash-after-sink", cid, "standby")


def test_an_exit_with_no_fault_of_its_job_is_an_exit(tmp_path):
    ex = executor(tmp_path)
    cid = commands.issue(ex.db, "crash-after-sink", "usage", guarantee="at-least-once")
    commands.finish(ex.db, cid, "done")
    ex.unplanned_exit("fraud", standby=False)  # another job's fault explains nothing
    (rec,) = ex.recoveries
    assert (rec.job, rec.fault, rec.command_id, rec.via) == ("fraud", "exit", None, "restart")


def test_after_a_takeover_the_next_standby_starts_once_the_first_batch_committed(tmp_path, monkeypatch):
    """A new standby's JVM start and rehearsal would share two cores with the takeover's first
    batch: it waits for that batch (the recovery measured), or for the cap."""
    import dataclasses
    import subprocess
    import sys
    import time

    from controlplane import fencing
    from controlplane.clock import now_ms
    from pipelines.supervisor.core import Supervisor
    from pipelines.supervisor.faults import PendingRecovery

    s = dataclasses.replace(load(), run_dir=tmp_path, store_path=tmp_path / "store.db")
    sup = Supervisor(s, ["usage"], standby=True)
    started, procs = [], []
    waiting = "import signal, time; signal.signal(signal.SIGUSR1, lambda *_: None); time.sleep(30)"

    def spawn_waiting():
        procs.append(subprocess.Popen([sys.executable, "-c", waiting]))
        return procs[-1]

    def start(child):  # a process that waits, as a standby does, instead of a Spark job
        started.append(child.job)
        child.proc = spawn_waiting()

    monkeypatch.setattr(sup, "start", start)
    active, standby = sup.children["usage"], sup.standbys["usage"]
    active.proc = subprocess.Popen([sys.executable, "-c", "pass"])
    standby.proc = spawn_waiting()
    try:
        active.proc.wait()
        sup.faults.recoveries.append(PendingRecovery("usage", "crash", now_ms()))
        assert sup.promote(active, "test")
        fencing.take_lease(sup.db, "usage")  # the new active holds a fresh lease
        sup.start_standbys()
        assert started == [], "not while the takeover's first batch is pending"
        sup.faults.recoveries.clear()  # its recovery was measured
        sup.start_standbys()
        assert started == ["usage-standby"]

        started.clear()  # a second takeover whose first batch never comes: the cap
        sup.faults.recoveries.append(PendingRecovery("usage", "crash", now_ms()))
        assert sup.promote(active, "test again")
        fencing.take_lease(sup.db, "usage")
        sup.start_standbys()
        assert started == []
        standby.restart_at = time.monotonic() - 1
        sup.start_standbys()
        assert started == ["usage-standby"]
    finally:
        for proc in [active.proc, *procs]:
            if proc is not None and proc.poll() is None:
                proc.kill()
