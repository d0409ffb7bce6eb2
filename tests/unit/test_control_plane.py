"""Commands are claimed exactly once; fencing rejects a stale epoch, and `fenced_write` is one
transaction that first checks it. Plain SQLite, no Spark."""
from __future__ import annotations

import threading

import pytest

from controlplane import commands, fencing
from controlplane.store import connect, transaction


def test_a_command_is_claimed_by_exactly_one_of_many_claimers(tmp_path):
    path = tmp_path / "s.db"
    db = connect(path)
    ids = [commands.issue(db, "crash", job="usage") for _ in range(20)]
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


def test_a_command_keeps_its_whole_life_and_its_defaults(tmp_path):
    db = connect(tmp_path / "s.db")
    cid = commands.issue(db, "zombie", "fraud")
    row = commands.get(db, cid)
    assert (row["status"], row["job"], row["started_at"], row["done_at"]) == ("pending", "fraud", None, None)
    [got] = commands.claim(db, ["zombie"], job="fraud")
    assert got.param("seconds") == 15.0  # the catalogue's default, stored with the command
    commands.finish(db, cid, "no such process", ok=False)
    row = commands.get(db, cid)
    assert row["status"] == "failed" and row["issued_at"] <= row["started_at"] <= row["done_at"]
    assert [r["id"] for r in commands.recent(db)] == [cid]


def test_fenced_write_commits_for_the_current_epoch(tmp_path):
    db = connect(tmp_path / "s.db")
    epoch = fencing.take_lease(db, "usage")
    with fencing.fenced_write(db, "usage", epoch, "batch 1") as conn:
        conn.execute("INSERT INTO usage_counts (guarantee, processed) VALUES ('x', 1)")
    assert db["usage_counts"].count == 1
    assert fencing.current_epoch(db, "usage") == epoch and fencing.current_epoch(db, "fraud") == 0


def test_an_instance_is_current_until_a_newer_lease_is_taken(tmp_path):
    db = connect(tmp_path / "s.db")
    first = fencing.take_lease(db, "usage")
    assert fencing.is_current(db, "usage", first)
    second = fencing.take_lease(db, "usage")
    assert not fencing.is_current(db, "usage", first) and fencing.is_current(db, "usage", second)
    assert fencing.is_current(db, "fraud", 1)  # no lease taken yet: nothing newer


def test_fenced_write_refuses_a_stale_epoch_before_running_its_body(tmp_path):
    db = connect(tmp_path / "s.db")
    old = fencing.take_lease(db, "usage")
    fencing.take_lease(db, "usage")
    ran = []
    with pytest.raises(fencing.FencedError, match="epoch 1 rejected, current epoch is 2 \\(batch 7\\)"):
        with fencing.fenced_write(db, "usage", old, "batch 7") as conn:
            ran.append(conn)
    assert ran == []
    assert not db.conn.in_transaction  # rolled back, the connection is free for the next write
    fencing.take_lease(db, "fraud")  # another job's lease is its own
    with fencing.fenced_write(db, "fraud", 1, "fraud batch 0"):
        pass


def test_fenced_write_rolls_back_when_its_body_fails(tmp_path):
    db = connect(tmp_path / "s.db")
    epoch = fencing.take_lease(db, "usage")
    with pytest.raises(ZeroDivisionError):
        with fencing.fenced_write(db, "usage", epoch, "batch 1") as conn:
            conn.execute("INSERT INTO usage_counts (guarantee, processed) VALUES ('x', 1)")
            1 / 0
    assert db["usage_counts"].count == 0 and not db.conn.in_transaction


def test_a_zombie_write_from_another_connection_is_rejected(tmp_path):
    """Two processes' view: the zombie's connection sees the newer lease taken on another one."""
    path = tmp_path / "s.db"
    zombie_db, live_db = connect(path), connect(path)
    stale = fencing.take_lease(zombie_db, "usage")
    fresh = fencing.take_lease(live_db, "usage")
    with pytest.raises(fencing.FencedError):
        with fencing.fenced_write(zombie_db, "usage", stale, "zombie batch 3") as conn:
            conn.execute("INSERT INTO usage_counts (guarantee, processed) VALUES ('x', 1)")
    fencing.record_rejection(zombie_db, "usage", stale, "zombie batch 3")
    [rejected] = live_db["rejected_writes"].rows
    assert (rejected["epoch"], rejected["current_epoch"], rejected["what"]) == (stale, fresh, "zombie batch 3")
    assert live_db["usage_counts"].count == 0
