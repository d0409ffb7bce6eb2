"""Exactly-once's dedupe on Spark's own state (pipelines.usage.dedupe): the usage job's stream for the
exactly-once guarantee (`counted_stream`) over batches shaped as the Kafka source hands them, each
batch a file read as one micro-batch, on the session's RocksDB store. A copy within the horizon is
not counted again — in a later batch, and after a restart, whose state Spark rebuilds from the
checkpoint; a copy appended long after the horizon is; and a checkpoint of the engine this
replaced is refused, never resumed."""
from __future__ import annotations

import dataclasses
import json

import pytest

from pipelines import guarantees
from pipelines.engine import checkpoints
from pipelines.engine.rehearsal import kafka_rows, kafka_schema
from pipelines.usage import dedupe
from pipelines.usage.job import counted_stream, spark_conf, tally

T0 = 1_790_000_000_000
EO = guarantees.policy("exactly-once")


def decision(txn_id: str, fraud: bool = False) -> tuple[bytes, bytes]:
    doc = {"txn_id": txn_id, "card_id": "c-1", "event_time": T0 - 5_000, "is_fraud": fraud}
    return txn_id.encode(), json.dumps(doc).encode()


class Stream:
    """The exactly-once query over a folder of batches, run to the end of what it holds, and run
    again (a restart: a new query on the same checkpoint) as often as asked."""

    def __init__(self, spark, s, tmp_path):
        self.spark, self.s = spark, s
        self.source, self.checkpoint = tmp_path / "source", tmp_path / "checkpoint"
        self.batches = 0

    def add(self, appended_ms: int, ids: list[str]) -> None:
        rows = kafka_rows([decision(i, i.endswith("!")) for i in ids], appended_ms, partitions=2)
        (self.spark.createDataFrame(rows, kafka_schema()).coalesce(1).write.mode("append")
         .parquet(str(self.source / f"batch={self.batches:03d}")))
        self.batches += 1

    def run(self) -> list[tuple[int, int]]:
        """The counts of each batch this run processed, in order."""
        frame = (self.spark.readStream.schema(kafka_schema()).option("maxFilesPerTrigger", 1)
                 .option("recursiveFileLookup", "true").parquet(str(self.source)))
        seen: list[tuple[int, int]] = []
        query = (counted_stream(frame, EO, self.s).writeStream.queryName("dedupe-test")
                 .foreachBatch(lambda df, _: seen.append(tally(df)))
                 .option("checkpointLocation", str(self.checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None
        self.last_progress = query.lastProgress
        return seen


@pytest.fixture
def stream(spark, settings, tmp_path):
    """With the usage application's own settings (no batch without data)."""
    s = dataclasses.replace(settings, dedupe_seconds=60)
    before = {k: spark.conf.get(k, None) for k in spark_conf(s)}
    for k, v in spark_conf(s).items():
        spark.conf.set(k, v)
    yield Stream(spark, s, tmp_path)
    for k, v in before.items():
        spark.conf.unset(k) if v is None else spark.conf.set(k, v)


def test_copies_within_the_horizon_count_once_across_batches_and_a_restart(stream):
    stream.add(T0, ["a", "b!", "c"])
    stream.add(T0 + 10_000, ["a", "d", "d"])          # a copy of an earlier batch's, and one within the batch
    assert stream.run() == [(3, 1), (1, 0)]
    ops = stream.last_progress["stateOperators"]
    assert ops and ops[0]["numRowsTotal"] == 4     # the ids are in Spark's state store
    assert (stream.checkpoint / "state" / "0").is_dir() and dedupe.private_state(stream.checkpoint) is None
    assert checkpoints.state_provider(stream.checkpoint).endswith("RocksDBStateStoreProvider")
    # a restart: a new query on the checkpoint finds the ids the state committed
    stream.add(T0 + 20_000, ["b!", "c", "e!"])
    assert stream.run() == [(1, 1)]


def test_a_copy_long_after_the_horizon_counts_again(stream):
    stream.add(T0, ["a", "b"])
    stream.add(T0 + 200_000, ["c"])                    # moves the watermark past a's horizon (60 s)
    stream.add(T0 + 210_000, ["d"])                    # a batch in which Spark evicts what the watermark passed
    stream.add(T0 + 220_000, ["a", "c"])               # a: appended 220 s after its first copy; c: within
    assert stream.run() == [(2, 0), (1, 0), (1, 0), (1, 0)]


def test_a_checkpoint_of_the_former_engine_is_refused_with_its_reason(tmp_path):
    old = tmp_path / "usage-exactly-once"
    (old / "dedupe" / "0").mkdir(parents=True)
    assert "former dedupe engine" in dedupe.private_state(old)
    windows = tmp_path / "usage-windows"
    (windows / "offsets").mkdir(parents=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": T0,
            "conf": {"spark.sql.streaming.stateStore.providerClass": "cardstream.state.InPlaceStateStoreProvider"}}
    (windows / "offsets" / "3").write_text("v1\n" + json.dumps(meta) + '\n{"decisions":{"0":5}}\n')
    assert "cardstream.state.InPlaceStateStoreProvider" in dedupe.private_state(windows)
    assert dedupe.private_state(tmp_path / "never-started") is None
