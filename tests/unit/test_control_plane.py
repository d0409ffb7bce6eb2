"""Commands are claimed exactly once; fencing rejects a stale epoch. Plain SQLite, no Spark."""
from __future__ import annotations

import threading

import pytest

from controlplane import commands, fencing
from controlplane.store import connect, transaction


def test_a_command_is_claimed_by_exactly_one_of_many_claimers(tmp_path):
    path = tmp_path / "s.db"
    db = connect(path)
    ids = [commands.issue(db, "crash", job="usage", seconds=1) for _ in range(20)]
    claimed: list[int] = []
    lock = threading.Lock()

    def claimer():
        mine = connect(path)
        for _ in range(10):
            got = commands.claim(mine, ["crash"])
            with lock:
                claimed.extend(c.id for c in got)

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == ids
    assert {r["status"] for r in db["commands"].rows} == {"started"}
    commands.finish(db, ids[0], "killed pid 1")
    row = db["commands"].get(ids[0])
    assert row["status"] == "done" and row["result"] == "killed pid 1" and row["done_at"] >= row["started_at"]


def test_claim_filters_by_kind_and_job(tmp_path):
    db = connect(tmp_path / "s.db")
    commands.issue(db, "crash", job="fraud")
    commands.issue(db, "sink-down", job="usage", seconds=5)
    assert commands.claim(db, ["crash"], job="usage") == []
    [got] = commands.claim(db, ["sink-down"], job="usage")
    assert got.param("seconds") == 5


def test_a_stale_epoch_cannot_write(tmp_path):
    db = connect(tmp_path / "s.db")
    old = fencing.take_lease(db, "usage")
    new = fencing.take_lease(db, "usage")
    assert new == old + 1
    with transaction(db) as conn:
        fencing.check(conn, "usage", new)
    with pytest.raises(fencing.FencedError):
        with transaction(db) as conn:
            conn.execute("INSERT INTO usage_counts (guarantee, processed) VALUES ('x', 1)")
            fencing.check(conn, "usage", old)
    assert db["usage_counts"].count == 0  # the stale write was rolled back
    fencing.record_rejection(db, "usage", old, "batch 3")
    assert db["rejected_writes"].count == 1
