"""The store's schema: declared tables created, an older store brought up to date by sqlite-utils
migrations (the two per-guarantee batch tables became the sink ledger), once, in one transaction."""
from __future__ import annotations

import sqlite3

import pytest
import sqlite_utils

from controlplane import store as st


def test_a_fresh_store_is_wal_and_has_every_declared_table_column_and_key(tmp_path):
    db = st.connect(tmp_path / "fresh.db")
    assert db.journal_mode == "wal"
    assert db["decisions"].pks == ["txn_id"]
    for name, (columns, pk) in st.TABLES.items():
        assert set(columns) <= set(db[name].columns_dict), name
        want = [pk] if isinstance(pk, str) else list(pk or [])
        assert db[name].pks == (want or ["rowid"]), name
    assert not st.MIGRATIONS.pending(db)
    indexed = {tuple(i.columns) for i in db["sink_batches"].indexes}
    assert ("sink", "checkpoint_id", "batch_id") in indexed


def test_an_old_store_loses_the_retired_tables_and_gains_missing_columns(tmp_path):
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.executescript("""
        CREATE TABLE usage_applied_batches (guarantee TEXT, batch_id INTEGER, applied_at INTEGER);
        CREATE TABLE usage_dropped_batches (guarantee TEXT, batch_id INTEGER, processed INTEGER);
        CREATE TABLE transactions_raw (txn_id TEXT PRIMARY KEY);
        CREATE TABLE usage_counts (guarantee TEXT PRIMARY KEY, processed INTEGER);
        INSERT INTO usage_applied_batches VALUES ('exactly-once', 3, 1);
        INSERT INTO usage_counts VALUES ('exactly-once', 42);
    """)
    old.commit()
    old.close()
    assert st.MIGRATIONS.pending(sqlite_utils.Database(path))

    db = st.connect(path)
    tables = set(db.table_names())
    assert not tables & {"usage_applied_batches", "usage_dropped_batches", "transactions_raw"}
    assert set(st.TABLES) <= tables
    assert {"fraud", "updated_at"} <= set(db["usage_counts"].columns_dict)  # added, not recreated
    assert list(db["usage_counts"].rows) == [{"guarantee": "exactly-once", "processed": 42, "fraud": None,
                                             "updated_at": None}]
    assert [m.name for m in st.MIGRATIONS.applied(db)] == ["0001_drop_unused_tables"]
    assert not st.MIGRATIONS.pending(db)


def test_opening_the_store_again_changes_nothing(tmp_path):
    path = tmp_path / "s.db"
    db = st.connect(path)
    db["usage_counts"].insert({"guarantee": "exactly-once", "processed": 5})
    schema = db.schema
    applied = [(m.name, m.applied_at) for m in st.MIGRATIONS.applied(db)]
    again = st.connect(path)
    assert again.schema == schema
    assert [(m.name, m.applied_at) for m in st.MIGRATIONS.applied(again)] == applied
    assert again["usage_counts"].get("exactly-once")["processed"] == 5


def test_a_transaction_lands_whole_or_not_at_all(tmp_path):
    db = st.connect(tmp_path / "s.db")
    with pytest.raises(sqlite3.IntegrityError):
        with st.transaction(db) as conn:
            conn.execute("INSERT INTO usage_counts (guarantee, processed) VALUES ('a', 1)")
            conn.execute("INSERT INTO usage_counts (guarantee, processed) VALUES ('a', 2)")  # same key
    assert db["usage_counts"].count == 0
    with st.transaction(db) as conn:
        conn.execute("INSERT INTO usage_counts (guarantee, processed) VALUES ('a', 1)")
        conn.execute("INSERT INTO usage_counts (guarantee, processed) VALUES ('b', 2)")
    assert db["usage_counts"].count == 2


def test_the_exactly_once_sinks_flush_each_commit_and_the_rest_do_not(tmp_path):
    """Issue 36 item 13: a power loss may take back the last NORMAL commits of a WAL store; the
    fraud and usage sinks commit FULL (the WAL flushed on each commit), so a batch they wrote is
    on disk before Spark commits it (docs/recovery.md)."""
    from types import SimpleNamespace

    from infra.config import load
    from pipelines.fraud.sinks import Sinks
    from pipelines.usage.job import UsageJob

    path = tmp_path / "s.db"
    assert st.connect(path).execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    with pytest.raises(ValueError):
        st.connect(path, synchronous="OFF")
    sinks = Sinks(SimpleNamespace(mode="microbatch", store_path=path, checkpoint=tmp_path / "cp"), load(), 1)
    assert [d.execute("PRAGMA synchronous").fetchone()[0] for d in (sinks.db, sinks.dlq_db)] == [2, 2]  # FULL
    s = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "CARDSTREAM_DB": str(path)})
    job = UsageJob(["exactly-once"], s)
    assert job.store_for("usage-exactly-once").execute("PRAGMA synchronous").fetchone()[0] == 2
