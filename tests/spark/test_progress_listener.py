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
