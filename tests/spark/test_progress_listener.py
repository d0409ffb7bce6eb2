"""The progress listener on a real Spark session: each batch's progress crosses to Python as one
JSON string (pipelines.engine.metrics.JsonBridge) and lands in `batch_progress` whole: offsets,
durations and the state operator's figures."""
from __future__ import annotations

import json
import time

from controlplane.store import connect
from pipelines.engine import metrics


def test_each_batch_progress_lands_in_the_store(spark, tmp_path):
    store = tmp_path / "store.db"
    connect(store)  # the schema
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(2):
        (folder / f"{i}.json").write_text("\n".join(json.dumps({"k": f"k{j % 3}", "v": j}) for j in range(10)))
    recorder = metrics.install(spark, store, {"progress-test": str(tmp_path / "checkpoint")})
    try:
        frame = spark.readStream.schema("k string, v long").option("maxFilesPerTrigger", 1).json(str(folder))
        query = (frame.groupBy("k").count().writeStream.queryName("progress-test").outputMode("update")
                 .foreachBatch(lambda df, _: df.collect())
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        db = connect(store)
        deadline = time.monotonic() + 30  # the listener runs on Spark's listener thread, after the batch
        while time.monotonic() < deadline and db["batch_progress"].count_where("query = 'progress-test'") < 2:
            time.sleep(0.2)
        rows = list(db["batch_progress"].rows_where("query = 'progress-test'", order_by="batch_id"))
    finally:
        spark.streams.removeListener(recorder)
    assert [r["batch_id"] for r in rows] == [0, 1]
    assert [r["num_input_rows"] for r in rows] == [10, 10]
    assert all(r["duration_ms"] > 0 for r in rows)
    assert rows[1]["state_rows"] == 3  # three keys in the aggregation's state
    assert json.loads(rows[1]["end_offsets"])[0]  # the file source's offset, as Spark's JSON
    assert rows[0]["checkpoint"] == str(tmp_path / "checkpoint")


def test_a_batch_s_rejected_decisions_are_stored(spark, settings, tmp_path):
    """The decisions a usage-style query rejects (parse_decisions' observed metric, which Spark keeps
    only in the progress) land in `not_kept` with their reasons, one row per batch."""
    from pyspark.sql import functions as F

    from pipelines.engine.sources import parse_decisions

    store = tmp_path / "store.db"
    connect(store)
    now = int(time.time() * 1000)
    decision = {"txn_id": "t", "card_id": "c-1", "event_time": now - 1000, "is_fraud": False}
    values = ([json.dumps({**decision, "txn_id": f"t-{i}"}).encode() for i in range(4)]
              + [json.dumps({**decision, "txn_id": ""}).encode(), b"{oops"])
    stream = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", len(values))
              .option("startTimestamp", now).load().where(F.col("value") < len(values))
              .select(F.element_at(F.array(*[F.lit(v) for v in values]), (F.col("value") + 1).cast("int")).alias("value"),
                      F.lit(0).alias("partition"), F.col("value").alias("offset"), F.col("timestamp")))
    checkpoint = str(tmp_path / "cp")
    recorder = metrics.install(spark, store, {"usage-rejects-test": checkpoint}, job="usage")
    try:
        query = (parse_decisions(stream, s=settings).writeStream.queryName("usage-rejects-test")
                 .foreachBatch(lambda df, _: df.count())
                 .option("checkpointLocation", checkpoint).trigger(once=True).start())
        query.awaitTermination(120)
        assert query.exception() is None
        db = connect(store)
        deadline = time.monotonic() + 30  # the listener runs on Spark's listener thread, after the batch
        while time.monotonic() < deadline and not db["not_kept"].count_where("query = 'usage-rejects-test'"):
            time.sleep(0.2)
        rows = list(db["not_kept"].rows_where("query = 'usage-rejects-test'"))
    finally:
        spark.streams.removeListener(recorder)
    assert len(rows) == 1, rows
    assert rows[0]["count"] == 2 and rows[0]["kind"] == "rejected" and rows[0]["job"] == "usage"
    assert rows[0]["batch_id"] == 0 and rows[0]["checkpoint"] == checkpoint
    assert json.loads(rows[0]["detail"]) == ["empty txn_id", "malformed JSON"]
