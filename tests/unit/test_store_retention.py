"""The store's retention (pipelines/supervisor/housekeeping.py) on a real SQLite store: rows older
than STORE_RETENTION_HOURS leave the growing tables in small transactions, younger ones stay, the
sink ledger and the commands are never touched, and each pass is recorded in `store_retention`."""
from __future__ import annotations

import pytest

from controlplane import ledger
from controlplane.store import TABLES, transaction
from pipelines.supervisor import housekeeping

HOUR = 3_600_000
NOW = 1_900_000_000_000
OLD, YOUNG = NOW - 30 * HOUR, NOW - 1 * HOUR


def decision(txn_id, decided_at):
    return {"txn_id": txn_id, "card_id": "c", "merchant_id": "m", "amount_cents": 100, "event_time": decided_at,
            "produced_at": decided_at, "decided_at": decided_at, "score": 0.1, "is_fraud": 0, "is_late": 0,
            "batch_id": 1}


def seed(db, n_old=7, n_young=3):
    db["decisions"].insert_all([decision(f"old-{i}", OLD + i) for i in range(n_old)]
                               + [decision(f"young-{i}", YOUNG + i) for i in range(n_young)], pk="txn_id")
    db["batch_progress"].insert_all([{"query": "fraud", "batch_id": i, "ts": ts} for i, ts in
                                     enumerate([OLD, OLD + 1, YOUNG])], pk=("query", "batch_id", "ts"))
    db["batch_stages"].insert_all([{"query": "fraud", "batch_id": i, "ts": ts} for i, ts in enumerate([OLD, YOUNG])],
                                  pk=("query", "batch_id", "ts"))
    db["audit"].insert_all([{"ts": ts, "job": "usage", "guarantee": "exactly-once", "metric": "processed"}
                            for ts in (OLD, YOUNG)], pk=("ts", "job", "guarantee", "metric"))
    db["fraud_paths"].insert_all([{"path": "stateful", "bucket": b} for b in (OLD, YOUNG)], pk=("path", "bucket"))
    # a window is old once it has ended: the session that began before the horizon and ends after it stays
    db["windows"].insert_all([
        {"kind": "tumbling", "key": "*", "window_start": OLD, "window_end": OLD + 60_000},
        {"kind": "sliding", "key": "*", "window_start": OLD, "window_end": OLD + 300_000},
        {"kind": "session", "key": "card-1", "window_start": OLD, "window_end": OLD + 60_000},
        {"kind": "session", "key": "card-2", "window_start": NOW - 24 * HOUR - 1000, "window_end": NOW - 23 * HOUR},
        {"kind": "tumbling", "key": "*", "window_start": YOUNG, "window_end": YOUNG + 60_000},
    ], pk=("kind", "key", "window_start"))
    db["late_events"].insert_all([{"kind": "tumbling", "window_start": OLD, "count": 3},
                                  {"kind": "tumbling", "window_start": YOUNG, "count": 1}], pk=("kind", "window_start"))
    db["process_memory"].insert_all([{"ts": ts, "process": "fraud", "pid": 1, "rss_mb": 100.0} for ts in (OLD, YOUNG)],
                                    pk=("ts", "process"))
    db["storage_bytes"].insert_all([{"ts": ts, "what": "store", "path": "x", "bytes": 1} for ts in (OLD, YOUNG)],
                                   pk=("ts", "what"))
    db["query_failures"].insert_all([{"job": "fraud", "query": "fraud", "ts": ts} for ts in (OLD, YOUNG)])
    db["rejected_writes"].insert_all([{"job": "usage", "epoch": 1, "ts": ts} for ts in (OLD, YOUNG)])
    db["commands"].insert({"kind": "crash", "job": "usage", "status": "done", "issued_at": OLD})
    with transaction(db) as conn:  # ledger rows as old as the oldest decisions
        for i in range(3):
            ledger.record(conn, ledger.Batch("usage-exactly-once", "cp-a", i), ledger.APPLIED, 1)
        conn.execute("UPDATE sink_batches SET ts = ?", [OLD])


def count(db, table):
    return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_rows_older_than_the_retention_go_and_younger_ones_stay(store):
    seed(store)
    pruned = housekeeping.prune(store, NOW, retention_hours=24, batch=2)  # 2 rows per transaction
    assert pruned == {"decisions": 7, "batch_progress": 2, "batch_stages": 1, "audit": 1, "fraud_paths": 1, "windows": 3,
                      "late_events": 1, "query_failures": 1, "rejected_writes": 1, "process_memory": 1,
                      "storage_bytes": 1}
    assert sorted(r[0] for r in store.execute("SELECT txn_id FROM decisions")) == ["young-0", "young-1", "young-2"]
    assert [r[0] for r in store.execute("SELECT batch_id FROM batch_progress")] == [2]
    assert sorted(r[0] for r in store.execute("SELECT key FROM windows WHERE kind = 'session'")) == ["card-2"]
    for table in ("batch_stages", "audit", "fraud_paths", "late_events", "process_memory", "storage_bytes", "query_failures",
                  "rejected_writes"):
        assert count(store, table) == 1, table
    # never pruned: the exactly-once ledger (sinks, the bound check and the audit read it) and the commands
    assert count(store, "sink_batches") == 3 and count(store, "commands") == 1


def test_each_pass_is_recorded_with_its_horizon(store):
    seed(store)
    housekeeping.prune(store, NOW, retention_hours=24)
    store["decisions"].insert(decision("old-again", OLD), pk="txn_id")  # a replay of an old batch, say
    housekeeping.prune(store, NOW + 1000, retention_hours=24)
    row = store["store_retention"].get("decisions")
    assert row["horizon"] == NOW + 1000 - 24 * HOUR
    assert row["deleted"] == 1 and row["deleted_total"] == 8
    assert store["store_retention"].get("windows")["deleted_total"] == 3
    assert not store["store_retention"].count_where("name = ?", ["sink_batches"])


def test_a_retention_of_zero_keeps_everything(store):
    seed(store)
    assert housekeeping.prune(store, NOW, retention_hours=0) == {}
    assert count(store, "decisions") == 10 and count(store, "store_retention") == 0


@pytest.mark.parametrize("rule", housekeeping.RULES, ids=lambda r: r.table)
def test_every_rule_names_a_table_and_time_column_of_the_store(rule):
    columns, _ = TABLES[rule.table]
    assert columns[rule.column] is int and (rule.ends is None or columns[rule.ends] is int)
    assert rule.table not in ("sink_batches", "commands", "quarantines")


def test_the_deletes_use_an_index(store):
    """A pass on a big table must not scan it once per batch: each delete's inner query is indexed."""
    for rule in housekeeping.RULES:
        where = f"{rule.column} < ?" + (" AND kind = ?" if rule.kinds else "")
        args = [NOW] + (["tumbling"] if rule.kinds else [])
        plan = " ".join(str(r[3]) for r in store.execute(
            f"EXPLAIN QUERY PLAN SELECT rowid FROM {rule.table} WHERE {where} LIMIT 5", args))
        if rule.table in ("query_failures", "rejected_writes"):  # one row per failure: small
            continue
        assert "USING" in plan and "INDEX" in plan, (rule.table, plan)


def ledger_rows(db, sink):
    return [tuple(r) for r in db.execute("SELECT checkpoint_id, batch_id, outcome FROM sink_batches WHERE sink = ? "
                                         "ORDER BY id", [sink])]


def test_the_ledger_keeps_what_a_restart_can_consult_and_prunes_the_rest(store, tmp_path):
    """Per sink and checkpoint: the newest MIN_BATCHES_TO_RETAIN batches (what Spark's logs still
    hold), every dropped row, rows younger than the audit's horizon and rows an audit cut has not
    folded stay; the replay check and the reused-batch refusal still work on what is left."""
    from infra.config import load
    from pipelines.audit.folds import UsageCut

    s = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "MIN_BATCHES_TO_RETAIN": "3", "AUDIT_HORIZON_MINUTES": "10"})
    with transaction(store) as conn:
        for b in range(10):
            batch = ledger.Batch("fraud", "cp-a", b, end_offsets={"t": {"0": b + 1}})
            ledger.apply_once(conn, batch, 1)
            if b == 8:
                ledger.apply_once(conn, batch, 1)  # a replay: skipped
        ledger.record(conn, ledger.Batch("usage-at-most-once", "cp-m", 0), ledger.DROPPED, 1)
        for b in range(10):
            ledger.record(conn, ledger.Batch("usage-at-most-once", "cp-m", b + 1), ledger.APPLIED, 1)
        for b in range(10):
            ledger.record(conn, ledger.Batch("usage-exactly-once", "cp-e", b), ledger.APPLIED, 1)
        conn.execute("UPDATE sink_batches SET ts = ?", [NOW - HOUR])
    # the audit has folded the exactly-once ledger up to its 5th row only
    fifth = store.execute("SELECT id FROM sink_batches WHERE sink = 'usage-exactly-once' ORDER BY id "
                          "LIMIT 1 OFFSET 4").fetchone()[0]
    store["audit_cuts"].insert({"name": "usage:exactly-once", "state": UsageCut("exactly-once", ledger_pos=fifth).to_json(),
                                "updated_at": NOW})
    deleted = housekeeping.prune_ledger(store, s, NOW, batch=2, pause_s=0)
    assert ledger_rows(store, "fraud") == [("cp-a", 6, "applied"), ("cp-a", 7, "applied"), ("cp-a", 8, "applied"),
                                           ("cp-a", 8, "skipped"), ("cp-a", 9, "applied")]
    assert ledger_rows(store, "usage-at-most-once")[0] == ("cp-m", 0, "dropped")
    assert [b for _, b, _ in ledger_rows(store, "usage-at-most-once")[1:]] == [7, 8, 9, 10]
    assert [b for _, b, _ in ledger_rows(store, "usage-exactly-once")] == list(range(5, 10))
    assert deleted == 6 + 6 + 5
    with transaction(store) as conn:
        again = ledger.Batch("fraud", "cp-a", 9, end_offsets={"t": {"0": 10}})
        assert ledger.apply_once(conn, again, 1) is False  # the newest batch's replay is still skipped
        with pytest.raises(ledger.ReusedBatch):  # and a pruned batch id handed again is still refused
            ledger.apply_once(conn, ledger.Batch("fraud", "cp-a", 2, end_offsets={"t": {"0": 3}}), 1)
    # rows younger than the audit's horizon stay whatever their batch id
    with transaction(store) as conn:
        for b in range(10, 20):
            ledger.record(conn, ledger.Batch("fraud", "cp-a", b), ledger.APPLIED, 1)
        conn.execute("UPDATE sink_batches SET ts = ?", [NOW - 60_000])
    assert housekeeping.prune_ledger(store, s, NOW) == 0


def test_card_profiles_older_than_the_history_ttl_go(store, tmp_path):
    """A card keeps its row while the stateful path keeps its event-time windows (61 days with
    the 60-day card history), long after its analyzers' profile (STATE_TTL_MINUTES)."""
    from infra.config import load

    s = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "STATE_TTL_MINUTES": "60", "LABEL_DELAY_DAYS": "7"})
    day = 86_400_000
    store["card_profiles"].insert_all([{"card_id": f"c{i}", "count": 1, "updated_at": NOW - i * 20 * day}
                                       for i in range(5)] + [{"card_id": "c5", "count": 1, "updated_at": NOW - 61 * day},
                                                         {"card_id": "c6", "count": 1, "updated_at": NOW - 62 * day}],
                                      pk="card_id")
    assert housekeeping.prune_profiles(store, s, NOW, batch=1) == 2  # 80 and 62 days old; 61 days is the edge
    assert sorted(r[0] for r in store.execute("SELECT card_id FROM card_profiles")) == ["c0", "c1", "c2", "c3", "c5"]
