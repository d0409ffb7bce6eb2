"""What every page relies on: the seed holds only what the real system writes (the audit's figures
consistent, never derived from lag; no progress row for an uncommitted batch), the store guard,
the token rule, and bounded reads on indexes."""
from __future__ import annotations

import importlib.util
import sqlite3

import pytest

from controlplane import ledger
from controlplane.store import TABLES
from dashboard import auth
from dashboard.data.store import open_store
from infra.config import load
from infra.contracts import GUARANTEES
from tests.harness.dashboard_seed import FAULT_BATCH, NOW, quiet, seed_store, world  # noqa: F401 - fixtures


def test_the_seed_writes_only_the_schema_s_tables_and_columns(world):
    db, _, _ = world
    for table in db.table_names():
        if table.startswith("_"):
            continue
        assert table in TABLES, table
        assert set(db[table].columns_dict) == set(TABLES[table][0]), table
    assert db["sink_batches"].count > 0 and db["audit"].count > 0
    assert {r[0] for r in db.conn.execute("SELECT DISTINCT outcome FROM sink_batches")} <= {
        ledger.APPLIED, ledger.SKIPPED, ledger.DROPPED}


@pytest.mark.parametrize("scenario", ["world", "quiet"])
def test_every_audit_row_is_a_consistent_cut(scenario, request):
    db, _, _ = request.getfixturevalue(scenario)
    rows = list(db.query("SELECT * FROM audit WHERE job = 'usage'"))
    assert len(rows) == 2 * 3 * 60
    for r in rows:
        assert r["observed"] == r["truth"] - r["lost"] + r["duplicated"], r
        assert r["duplicated"] == r["replayed"] + r["upstream"] and r["lag_records"] >= 0
        if r["guarantee"] != "at-most-once":
            assert r["lost"] == 0, r    # the durable guarantees lose nothing, however far behind
        if r["guarantee"] == "exactly-once":
            assert r["duplicated"] == 0, r
    behind = [r for r in rows if r["lag_records"] > 100]
    assert behind and all(r["lost"] == 0 for r in behind if r["guarantee"] == "at-least-once")


def test_no_progress_row_for_a_batch_spark_did_not_commit(world):
    db, seeded, _ = world
    running = seeded.batches["usage-at-least-once"][-1]
    assert running.committed is None
    assert not list(db.query("SELECT 1 FROM batch_progress WHERE query = ? AND batch_id = ?",
                             ["usage-at-least-once", running.batch_id]))
    rows = list(db.query("SELECT ts FROM batch_progress WHERE query = ? AND batch_id = ?",
                         ["usage-at-least-once", FAULT_BATCH]))
    assert len(rows) == 1 and rows[0]["ts"] > seeded.fault_at  # the replay's, after the restart
    amo = list(db.query("SELECT 1 FROM batch_progress WHERE query = ? AND batch_id = ? AND ts < ?",
                        ["usage-at-most-once", FAULT_BATCH, seeded.fault_at + 10_000]))
    assert amo == []


def test_seed_scenarios_differ_only_by_the_fault(world, quiet):
    (db, crash, _), (qdb, calm, _) = world, quiet
    assert crash.fault_at and calm.fault_at is None
    assert sorted(c["kind"] for c in crash.commands) == ["bad-input", "crash", "set-rate"]
    assert all(calm.final[g]["lost"] == calm.final[g]["duplicated"] == 0 for g in GUARANTEES)
    assert qdb["recoveries"].count == 0 and db["recoveries"].count == 1


@pytest.mark.parametrize("host,loopback", [("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True),
                                           ("::1", True), ("0.0.0.0", False), ("192.168.1.5", False),
                                           ("", False), (None, False), ("example.org", False)])
def test_loopback(host, loopback):
    assert auth.is_loopback(host) is loopback


def test_token_rule():
    assert auth.check(None, "127.0.0.1", None).allowed  # local, no token: open
    assert not auth.check(None, "127.0.0.1", "t").allowed  # a token is set: asked for
    assert not auth.check("x", "127.0.0.1", "t").allowed
    assert auth.check("t", "127.0.0.1", "t").allowed
    locked = auth.check("anything", "0.0.0.0", None)  # beyond loopback without a token: locked
    assert not locked.allowed and "DASHBOARD_TOKEN" in locked.reason
    assert auth.check("t", "0.0.0.0", "t").allowed


def test_a_locked_store_fails_fast_with_database_is_locked(tmp_path, monkeypatch):
    path = tmp_path / "locked.db"
    monkeypatch.setenv("CARDSTREAM_DB", str(path))
    monkeypatch.setenv("DASHBOARD_STORE_TIMEOUT_MS", "100")
    with open_store(load()) as db:
        db["commands"].insert({"kind": "pause", "job": "simulator", "status": "pending", "issued_at": NOW})
    holder = sqlite3.connect(str(path), isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            with open_store(load()) as db:
                db.conn.execute("SELECT COUNT(*) FROM commands").fetchone()
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_recent_reads_use_indexes(store):
    seed_store(store, NOW)

    def plan(sql, args=()):
        return " ".join(r[3] for r in store.conn.execute("EXPLAIN QUERY PLAN " + sql, args))
    assert "INDEX" in plan("SELECT COUNT(*) FROM decisions WHERE decided_at > ?", [NOW])
    assert "INDEX" in plan("SELECT * FROM batch_progress WHERE ts > ? ORDER BY ts DESC LIMIT 5", [NOW])
    assert "INDEX" in plan("SELECT * FROM windows WHERE kind = ? AND window_start > ?", ["tumbling", NOW])
    assert "INDEX" in plan("SELECT * FROM audit WHERE job = ? AND metric = ? AND ts > ?", ["usage", "processed", NOW])


def test_the_old_flat_module_is_gone():
    assert importlib.util.find_spec("dashboard.data").submodule_search_locations  # a package now
