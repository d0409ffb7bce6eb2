"""A fraud job's stop waits for the progress listener to record each query's last batch, and only
for a batch Spark posts: an idle trigger's progress (no rows, the next batch's id) reaches
`lastProgress` but never the listener, and waiting for it held every stop for the whole timeout."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from controlplane.store import connect
from pipelines.engine.metrics import last_posted_batch, wait_for_listener

pytestmark = pytest.mark.unit


def test_the_batch_to_wait_for():
    assert last_posted_batch({"batchId": 7, "numInputRows": 120}) == 7
    assert last_posted_batch({"batchId": 4, "numInputRows": 0}) == 3  # idle: batch 4 has not run
    assert last_posted_batch({"batchId": 0, "numInputRows": 0}) is None  # idle from its start
    assert last_posted_batch(None) is None


def query(name: str, batch_id: int, rows: int) -> SimpleNamespace:
    return SimpleNamespace(name=name, lastProgress={"batchId": batch_id, "numInputRows": rows})


def statements(db, queries, timeout_s: float) -> int:
    """How many statements the wait ran: one a query whose batch is recorded, more while it polls."""
    ran = []
    db.conn.set_trace_callback(ran.append)
    try:
        wait_for_listener(queries, db, timeout_s)
    finally:
        db.conn.set_trace_callback(None)
    return sum("batch_progress" in s for s in ran)


def test_an_idle_query_is_not_waited_for_and_an_unrecorded_batch_is(tmp_path):
    db = connect(tmp_path / "store.db")
    db["batch_progress"].insert_all([{"query": "fraud-dlq", "batch_id": b, "ts": b, "num_input_rows": 5}
                                     for b in range(4)], pk=("query", "batch_id", "ts"), alter=True)
    # the dead-letter query ran batches 0-3 and then idled (its lastProgress says batch 4, no rows)
    assert statements(db, [query("fraud-dlq", 4, 0), query("fraud", 0, 0)], timeout_s=30) == 1
    # a batch with rows the listener has not recorded yet is polled for until the deadline
    assert statements(db, [query("fraud-dlq", 5, 9)], timeout_s=0.5) > 1
