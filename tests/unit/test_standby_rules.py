"""Leases with a heartbeat, and when a warm standby takes over (real SQLite, no Spark)."""
from __future__ import annotations

import threading
import time

from controlplane import fencing
from controlplane.store import connect
from pipelines.engine import standby


def test_heartbeat_renews_and_a_clean_stop_releases(tmp_path):
    db = connect(tmp_path / "s.db")
    assert fencing.lease_age_ms(db, "fraud") is None
    epoch = fencing.take_lease(db, "fraud")
    beat = standby.Heartbeat(tmp_path / "s.db", "fraud", epoch, interval=0.05)
    beat.start()
    time.sleep(0.3)
    assert fencing.lease_age_ms(db, "fraud") < 200
    newer = fencing.take_lease(db, "fraud")
    assert not fencing.renew(db, "fraud", epoch), "a superseded epoch cannot renew"
    beat.stop(release=True)
    assert fencing.lease_age_ms(db, "fraud") < 1_000, "releasing an old epoch leaves the new holder's lease alone"
    fencing.release(db, "fraud", newer)
    assert fencing.lease_age_ms(db, "fraud") > 1_000_000, "released: free at once"


def test_standby_waits_while_the_active_beats_and_takes_over_when_it_stops(tmp_path):
    db = connect(tmp_path / "s.db")
    epoch = fencing.take_lease(db, "usage")
    stopping, result = threading.Event(), []
    t = threading.Thread(target=lambda: result.append(standby.wait_for_takeover(db, "usage", 0.5, stopping)))
    for _ in range(8):  # the active keeps beating: the standby keeps waiting
        fencing.renew(db, "usage", epoch)
        if _ == 0:
            t.start()
        time.sleep(0.1)
    assert not result and db["standbys"].get("usage")["pid"] > 0
    t.join(5)  # the beats stop: after the TTL the lease is stale and the standby goes
    assert result == [True]


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
