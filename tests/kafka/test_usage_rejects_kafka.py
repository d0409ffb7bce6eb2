"""The usage job's guarantee queries on real Kafka and Spark, with decisions that break the contract
among valid ones: none counted, each batch's rejects stored in `not_kept` with their reasons, for
at-least-once and exactly-once alike (the parse's observed metric, before exactly-once's dedupe)."""
from __future__ import annotations

import dataclasses
import json
import time

from bench.harness.jobs import decision, producer
from controlplane import fencing
from pipelines import guarantees
from pipelines.engine import metrics
from pipelines.usage.job import UsageJob, checkpoint_dir


def test_rejected_decisions_are_not_counted_and_are_stored_per_guarantee(kafka, spark, topic, settings, tmp_path):
    name = topic("decisions-rejects", partitions=2)
    s = dataclasses.replace(settings, topics=dataclasses.replace(settings.topics, decisions=name),
                            store_path=tmp_path / "cardstream.db", checkpoint_root=tmp_path / "checkpoints")
    good = [decision(i, i % 4 == 0) for i in range(40)]
    bad = [(b"b-1", b"{oops"), (b"b-2", json.dumps({**good[0], "txn_id": "b-2", "card_id": ""}).encode()),
           (b"b-3", json.dumps({**good[1], "txn_id": "b-3", "event_time": "soon"}).encode()), (b"b-4", b"\xff{}")]
    prod = producer(s)
    for d in good + good[:5]:  # five sent twice
        prod.send(name, key=d["txn_id"].encode(), value=json.dumps(d).encode())
    for key, value in bad:
        prod.send(name, key=key, value=value)
    prod.flush()
    prod.close()

    job = UsageJob(["at-least-once", "exactly-once"], s, windows=False)
    job.spark = spark
    job.epoch = fencing.take_lease(job.db, "usage")
    recorder = metrics.install(spark, s.store_path, {p.query: str(checkpoint_dir(s, p.query)) for p in job.policies},
                               job="usage")
    try:
        queries = [job.start_query(p) for p in job.policies]
        for q in queries:
            q.processAllAvailable()
        for q in queries:
            q.stop()
            assert q.exception() is None
        deadline = time.monotonic() + 30  # the listener writes after each batch, on Spark's listener thread
        while time.monotonic() < deadline and job.db["not_kept"].count < len(job.policies):
            time.sleep(0.2)
    finally:
        spark.streams.removeListener(recorder)

    counts = guarantees.counts(job.db)
    fraud = sum(d["is_fraud"] for d in good)
    assert (counts["at-least-once"]["processed"], counts["at-least-once"]["fraud"]) == (
        45, fraud + sum(d["is_fraud"] for d in good[:5]))
    assert (counts["exactly-once"]["processed"], counts["exactly-once"]["fraud"]) == (40, fraud)
    rows = {r["query"]: r for r in job.db["not_kept"].rows}
    assert set(rows) == {p.query for p in job.policies}, rows
    for row in rows.values():
        assert row["count"] == len(bad) and row["kind"] == "rejected" and row["job"] == "usage"
        assert json.loads(row["detail"]) == ["empty card_id", "invalid UTF-8", "malformed JSON",
                                             "wrong type for event_time"]

