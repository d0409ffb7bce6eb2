"""Exactly-once's dedupe (cardstream.state.PartitionDedupe) on a real Kafka stream: what it learns of
a batch from the Kafka source before counting it."""
from __future__ import annotations

import dataclasses
import json

from bench.harness.jobs import decision, producer


def test_the_dedupe_knows_each_partitions_records_before_it_counts_a_batch(kafka, spark, topic, settings, tmp_path):
    """Exactly-once's tables make room for a batch once, from the Kafka source's offset ranges
    (PartitionDedupe.expectedRows): the figures it reads are each partition's records in the batch."""
    from pipelines.engine.sources import read_kafka

    name = topic("decisions-expected", partitions=3)
    s = dataclasses.replace(settings, topics=dataclasses.replace(settings.topics, decisions=name))
    prod = producer(s)
    for i in range(60):
        prod.send(name, value=json.dumps(decision(i, False)).encode(), partition=0 if i < 35 else 1 + i % 2)
    prod.flush()
    prod.close()
    seen = []

    def batch(df, batch_id):
        jvm = df.sparkSession._jvm
        expected = jvm.cardstream.state.PartitionDedupe.expectedRows(jvm.cardstream.parse.DecisionCheck.rows(df._jdf))
        actual = {r["partition"]: r["count"] for r in df.groupBy("partition").count().collect()}
        seen.append(({int(k): int(expected[k]) for k in expected.keySet()}, actual))

    stream = read_kafka(spark, name, s, starting_offsets="earliest", max_offsets_per_trigger=50, headers=False)
    q = (stream.writeStream.foreachBatch(batch).option("checkpointLocation", str(tmp_path / "cp"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    assert len(seen) >= 2, seen  # 60 records, at most 50 a batch
    for expected, actual in seen:
        assert expected == {p: n for p, n in actual.items() if n}, seen
    assert sum(sum(a.values()) for _, a in seen) == 60
    # rows from anywhere else (a test's frame): nothing known, the tables grow as they fill
    frame = spark.createDataFrame([(b"k", b"{}", 0)], "key binary, value binary, partition int")
    assert dict(spark._jvm.cardstream.state.PartitionDedupe.expectedRows(frame._jdf.queryExecution().toRdd())) == {}
