"""Nothing dropped without a trace (issue 36 item 6), the plain parts on a real SQLite store: a
usage batch's rejected decisions become a `not_kept` row (from its progress's observed metric), the
fraud store sink counts the decisions it did not keep for a txn_id decided before, and the
dashboard says both in words."""
from __future__ import annotations

import json
from types import SimpleNamespace

from controlplane import ledger
from dashboard.data import faults
from pipelines.engine.metrics import rejected_row
from pipelines.engine.sources import DECISIONS_REJECTED
from pipelines.fraud import sinks


def progress(batch_id: int, metrics: dict) -> SimpleNamespace:
    return SimpleNamespace(name="usage-exactly-once", id="q", batchId=batch_id, observedMetrics=metrics)


def test_a_batch_s_rejected_decisions_become_a_row():
    row = rejected_row(progress(4, {DECISIONS_REJECTED: {"rejected": 3, "reasons": ["malformed JSON", "empty txn_id"]}}),
                       {"usage-exactly-once": "/cp/usage-exactly-once"}, "usage")
    assert row["count"] == 3 and row["kind"] == "rejected" and row["batch_id"] == 4
    assert row["checkpoint"] == "/cp/usage-exactly-once" and row["job"] == "usage"
    assert json.loads(row["detail"]) == ["empty txn_id", "malformed JSON"]
    assert rejected_row(progress(5, {DECISIONS_REJECTED: {"rejected": 0, "reasons": []}}), {}, "usage") is None
    assert rejected_row(progress(6, {}), {}, "usage") is None  # a query that does not read decisions


def decision(txn_id: str, decided_at: int, batch_id: int) -> tuple:
    row = {c: None for c in sinks.DECISION_COLUMNS}
    row.update(txn_id=txn_id, decided_at=decided_at, batch_id=batch_id, card_id="c", is_fraud=0)
    return tuple(row[c] for c in sinks.DECISION_COLUMNS)


def test_the_store_sink_counts_what_it_did_not_keep(store):
    conn = store.conn
    first = ledger.Batch("fraud", "cp-1", 0)
    ids = ["t-1", "t-2"]
    kept = conn.executemany(sinks._INSERT, [decision(t, 1_000, 0) for t in ids]).rowcount
    assert sinks.count_repeated(conn, first, ids, kept, 1_000) == 0
    # t-2 decided again (a producer sent it twice), and t-3 twice in the same batch
    ids = ["t-2", "t-3", "t-3", "t-4"]
    kept = conn.executemany(sinks._INSERT, [decision(t, 2_000, 1) for t in ids]).rowcount
    assert kept == 2
    assert sinks.count_repeated(conn, ledger.Batch("fraud", "cp-1", 1), ids, kept, 2_000) == 2
    rows = list(store.query("SELECT * FROM not_kept"))
    assert len(rows) == 1 and rows[0]["count"] == 2 and rows[0]["kind"] == "repeated"
    assert rows[0]["batch_id"] == 1 and rows[0]["query"] == "fraud" and rows[0]["checkpoint"] == "cp-1"
    assert json.loads(rows[0]["detail"]) == ["t-2", "t-3"]
    assert store["decisions"].get("t-2")["batch_id"] == 0  # the first decision is the one kept


def test_the_dashboard_says_what_was_not_kept_and_why(store):
    assert faults.not_kept(store).empty
    store["not_kept"].insert_all([
        {"job": "usage", "query": "usage-exactly-once", "checkpoint": "/cp", "batch_id": b, "kind": "rejected",
         "count": n, "detail": json.dumps(r), "ts": 1_000 + b} for b, n, r in
        [(1, 2, ["malformed JSON"]), (2, 1, ["empty txn_id", "malformed JSON"])]])
    store["not_kept"].insert({"job": "fraud", "query": "fraud", "checkpoint": "cp-1", "batch_id": 7,
                              "kind": "repeated", "count": 1, "detail": json.dumps(["t-9"]), "ts": 2_000})
    df = faults.not_kept(store).set_index("query")
    assert df.loc["usage-exactly-once", "count"] == 3 and df.loc["usage-exactly-once", "batches"] == 2
    assert df.loc["usage-exactly-once", "why"] == \
        "decisions breaking the contract, not counted (empty txn_id, malformed JSON)"
    assert df.loc["fraud", "count"] == 1 and "(e.g. t-9)" in df.loc["fraud", "why"]
    assert "store keeps the first decision" in df.loc["fraud", "why"]
