"""Leases with a heartbeat, and when a warm standby takes over (real SQLite, no Spark)."""
from __future__ import annotations

import os
import threading
import time

from controlplane import fencing
from controlplane.clock import now_ms
from controlplane.store import connect
from pipelines.engine import standby
from pipelines.supervisor.core import first_batch_pending


def test_heartbeat_renews_and_a_clean_stop_releases(tmp_path):
    db = connect(tmp_path / "s.db")
    assert fencing.lease_age_ms(db, "fraud") is None
    epoch = fencing.take_lease(db, "fraud")
    lost = []
    beat = standby.Heartbeat(tmp_path / "s.db", "fraud", epoch, interval=0.05, on_lost=lambda *a: lost.append(a))
    beat.start()
    time.sleep(0.3)
    assert fencing.lease_age_ms(db, "fraud") < 200
    newer = fencing.take_lease(db, "fraud")
    assert not fencing.renew(db, "fraud", epoch), "a superseded epoch cannot renew"
    beat.join(5)
    assert lost == [("fraud", epoch, newer)], "the beat that finds a newer epoch says so, once"
    beat.stop(release=True)
    assert fencing.lease_age_ms(db, "fraud") < 1_000, "releasing an old epoch leaves the new holder's lease alone"
    fencing.release(db, "fraud", newer)
    assert fencing.lease_age_ms(db, "fraud") > 1_000_000, "released: free at once"


BEATING_CHILD = """
import sys, time
from controlplane import fencing
from controlplane.store import connect
db = connect(sys.argv[1])
epoch = fencing.take_lease(db, "usage")
print("holding", flush=True)
for _ in range(8):  # an active that beats for 0.8 s, then is gone
    fencing.renew(db, "usage", epoch)
    time.sleep(0.1)
"""


def test_standby_waits_while_the_active_beats_and_takes_over_when_it_is_gone(tmp_path):
    import subprocess
    import sys

    from infra.config import ROOT

    db = connect(tmp_path / "s.db")
    active = subprocess.Popen([sys.executable, "-c", BEATING_CHILD, str(tmp_path / "s.db")], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": str(ROOT)})
    assert active.stdout.readline().strip() == "holding"
    stopping, result = threading.Event(), []
    t = threading.Thread(target=lambda: result.append(standby.wait_for_takeover(db, "usage", 0.5, stopping)))
    t.start()
    time.sleep(0.6)
    assert not result and db["standbys"].get("usage")["pid"] > 0  # the active keeps beating
    active.wait(10)
    t.join(5)  # the beats stop with the process: after the TTL the lease is stale and the standby goes
    assert result == [True]


def test_a_starved_active_keeps_its_lease(tmp_path):
    """Issue 36 item 3: under load an active's heartbeat fell 5 s behind and its standby took the
    lease: a needless failover, and no standby left for the next crash. A stale lease whose holder
    still runs is left to the supervisor (which promotes when the active exits)."""
    db = connect(tmp_path / "s.db")
    fencing.take_lease(db, "usage")  # held by this process, which beats no more: starved
    assert standby.holder_runs(fencing.holder(db, "usage"))
    stopping, result = threading.Event(), []
    t = threading.Thread(target=lambda: result.append(standby.wait_for_takeover(db, "usage", 0.2, stopping)))
    t.start()
    time.sleep(1.0)  # five TTLs
    assert not result, "the standby took a lease whose holder still runs"
    stopping.set()
    t.join(5)
    assert result == [False]
    assert not standby.holder_runs("another-host:1") and not standby.holder_runs(None)


def test_a_promotion_or_a_stop_ends_the_wait(tmp_path):
    db = connect(tmp_path / "s.db")
    epoch = fencing.take_lease(db, "fraud")
    fencing.renew(db, "fraud", epoch)
    stopping = threading.Event()
    standby.PROMOTED.set()
    try:
        assert standby.wait_for_takeover(db, "fraud", 60, stopping) is True
    finally:
        standby.PROMOTED.clear()
    stopping.set()
    assert standby.wait_for_takeover(db, "fraud", 60, stopping) is False


def test_a_rehearsal_is_cut_short_when_the_lease_lapses_not_while_it_is_held(tmp_path):
    """A standby's rehearsal (at its start, and again after loading another model) polls
    `takeover_due`: without a supervisor to promote it, a lease that lapses meanwhile (no beat for
    the TTL and its holder gone) must end the rehearsal, not wait for it; a held or starved lease
    must not."""
    import subprocess
    import sys

    from infra.config import ROOT

    db = connect(tmp_path / "s.db")
    assert standby.lease_standing(db, "fraud", 0.2)[0] == standby.FREE and standby.takeover_due(db, "fraud", 0.2)
    fencing.take_lease(db, "fraud")  # held by this process, which runs
    assert standby.lease_standing(db, "fraud", 60)[0] == standby.HELD
    assert not standby.takeover_due(db, "fraud", 60)
    time.sleep(0.3)
    assert standby.lease_standing(db, "fraud", 0.2)[:1] == (standby.STARVED,)
    assert not standby.takeover_due(db, "fraud", 0.2), "a holder that still runs is starved, not gone"
    gone = subprocess.Popen([sys.executable, "-c", BEATING_CHILD.replace("range(8)", "range(1)"), str(tmp_path / "s.db")],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": str(ROOT)})
    assert gone.stdout.readline().strip() == "holding"
    gone.wait(10)
    assert not standby.takeover_due(db, "usage", 60), "its last beat is fresh"
    time.sleep(0.3)
    standing, age, holder = standby.lease_standing(db, "usage", 0.2)
    assert standing == standby.LAPSED and age > 200 and holder.endswith(f":{gone.pid}")
    assert standby.takeover_due(db, "usage", 0.2)
    standby.PROMOTED.set()
    try:
        assert standby.takeover_due(db, "fraud", 60), "a promotion ends it whatever the lease says"
    finally:
        standby.PROMOTED.clear()


SUPERSEDED_CHILD = """
import sys, time
from controlplane import fencing
from controlplane.store import connect
from infra import logs
from pipelines.engine.standby import Heartbeat
logs.setup()
db = connect(sys.argv[1])
epoch = fencing.take_lease(db, "usage")
Heartbeat(sys.argv[1], "usage", epoch).start()
print("holding", epoch, flush=True)
while True:  # a job with no batch to write: nothing of it would ever reach a fenced write
    time.sleep(1)
"""


def test_a_frozen_instance_woken_after_a_takeover_exits_on_its_next_beat(tmp_path):
    """The zombie fault's mechanism on its own: an active instance is frozen (SIGSTOP), a newer
    one takes the lease, the frozen one is woken (SIGCONT). It has no batch to write, so no
    fenced write would ever stop it; its heartbeat sees the lease lost and it exits 4 at once."""
    import os
    import signal
    import subprocess
    import sys

    from infra.config import ROOT

    store = tmp_path / "s.db"
    child = subprocess.Popen([sys.executable, "-c", SUPERSEDED_CHILD, str(store)], cwd=ROOT, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert child.stdout.readline().startswith("holding 1")
        os.kill(child.pid, signal.SIGSTOP)
        assert fencing.take_lease(connect(store), "usage") == 2  # the replacement
        os.kill(child.pid, signal.SIGCONT)
        code = child.wait(timeout=120)  # a liveness bound only: it exits on its first beat after waking
        said = child.stdout.read()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert code == 4, said
    assert "epoch 1 no longer holds the lease (the job's epoch is 2)" in said


def test_a_waiting_standby_refreshes_what_it_holds_and_a_failed_refresh_does_not_end_the_wait(tmp_path):
    db = connect(tmp_path / "s.db")
    epoch = fencing.take_lease(db, "fraud")
    fencing.renew(db, "fraud", epoch)
    stopping, ticks = threading.Event(), []

    def tick():
        ticks.append(time.monotonic())
        if len(ticks) == 1:
            raise RuntimeError("model files half written")
        if len(ticks) == 3:
            stopping.set()

    assert standby.wait_for_takeover(db, "fraud", 60, stopping, tick=tick, tick_s=0.2) is False
    assert len(ticks) == 3 and ticks[2] - ticks[0] >= 0.4


def test_a_standby_waits_for_its_jobs_first_batch_with_rows_or_the_limit(tmp_path):
    """At the start the standby waits for its active's first batch with rows: one of its job's queries,
    with rows, committed after the lease; a job given no rows gets it after the limit."""
    db = connect(tmp_path / "s.db")
    pid = os.getpid()
    assert first_batch_pending(db, "fraud", pid, 30), "no lease taken yet"
    fencing.take_lease(db, "fraud")
    assert first_batch_pending(db, "fraud", pid + 1, 30), "the lease of another process is not its active's"
    db.conn.execute("UPDATE leases SET taken_at = ? WHERE job = 'fraud'", [now_ms() - 70_000])
    db.conn.commit()
    assert first_batch_pending(db, "fraud", pid, 600), "within the limit, no batch yet"
    taken = db.execute("SELECT taken_at FROM leases WHERE job = 'fraud'").fetchone()[0]
    not_its_first = (("fraud-dlq", 50, taken + 1), ("fraud", 0, taken + 1), ("fraud", 50, taken - 1))
    for query, rows, ts in not_its_first:
        db["batch_progress"].insert({"query": query, "batch_id": 0, "ts": ts, "num_input_rows": rows})
        assert first_batch_pending(db, "fraud", pid, 600), (query, rows, ts)
    assert not first_batch_pending(db, "fraud", pid, 60), "past the limit: a job given no rows gets its standby"
    db["batch_progress"].insert({"query": "fraud", "batch_id": 1, "ts": taken + 2, "num_input_rows": 50})
    assert not first_batch_pending(db, "fraud", pid, 600), "its first batch with rows committed"
