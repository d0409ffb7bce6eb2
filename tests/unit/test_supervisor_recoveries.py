"""Recoveries the supervisor measures when a job exits by itself: attributed to the in-job fault
that just ran for it (crash-after-sink's own kill) or called an `exit`, and how it came back."""
from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from controlplane import commands
from controlplane.store import connect
from infra.config import load
from pipelines.supervisor.faults import FaultExecutor
from pipelines.supervisor.processes import Child, standby_waits


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



def test_a_standby_slot_waits_for_the_first_batch_or_a_dead_standbys_backoff():
    """A new standby's JVM start and rehearsal would share two cores with its active's first batch
    (at the start and after a takeover): such a slot waits while that batch is pending (its cap is
    in first_batch_pending); a dead standby's backoff is kept as before."""
    slot = Child("usage-standby", ["true"], Path("/dev/null"), after_first_batch=True)
    assert standby_waits(slot, first_batch_pending=True, now=100.0)
    assert not standby_waits(slot, first_batch_pending=False, now=100.0)
    backoff = Child("usage-standby", ["true"], Path("/dev/null"), restart_at=130.0)
    assert standby_waits(backoff, first_batch_pending=False, now=100.0)
    assert not standby_waits(backoff, first_batch_pending=False, now=131.0)
    assert not standby_waits(Child("usage-standby", ["true"], Path("/dev/null")), first_batch_pending=True, now=100.0)


def test_a_standby_waits_for_a_batch_with_rows_after_its_active_took_the_lease(tmp_path):
    """Before the demo's first batch (and a takeover's, or a cold restart's) no standby JVM starts
    beside it; at most `cap_s` after the active took the lease."""
    import os

    from controlplane import fencing
    from pipelines.supervisor.core import first_batch_pending

    db = connect(tmp_path / "store.db")
    me = os.getpid()
    assert first_batch_pending(db, "usage", me, 30)  # nobody holds the lease yet
    fencing.take_lease(db, "usage")  # held by this process: the active
    assert first_batch_pending(db, "usage", me + 1, 30)  # a new active that has not taken it yet
    taken = db.execute("SELECT taken_at FROM leases WHERE job = 'usage'").fetchone()[0]
    row = {"batch_id": 0, "num_input_rows": 40, "ts": taken - 1}
    db["batch_progress"].insert({**row, "query": "usage-exactly-once"})  # before the lease: another instance's
    db["batch_progress"].insert({**row, "query": "fraud", "ts": taken + 5})  # another job's
    db["batch_progress"].insert({**row, "query": "usage-windows", "ts": taken + 5, "num_input_rows": 0})
    assert first_batch_pending(db, "usage", me, 30)
    assert not first_batch_pending(db, "usage", me, 0)  # the cap
    db["batch_progress"].insert({**row, "query": "usage-at-most-once", "ts": taken + 9})
    assert not first_batch_pending(db, "usage", me, 30)
    time.sleep(0.02)  # the batch's ts is 9 ms past the first lease
    fencing.take_lease(db, "usage")  # a takeover: the batches before the new lease no longer count
    assert first_batch_pending(db, "usage", me, 30)
