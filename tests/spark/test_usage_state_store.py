"""The usage job's dedupe state store (USAGE_STATE_STORE): a new checkpoint takes the configured
store, and a checkpoint made under another store keeps it, with its state, after the switch.

Exactly-once's query plan (`pipelines.usage.job.counted_stream`) on the real session, over
decisions shaped as Kafka's rows read from a folder; a txn_id sent again in a later batch must
not be counted again whichever store holds it.
"""
from __future__ import annotations

import dataclasses
import json
import time

import pytest

from infra.config import STATE_STORES
from pipelines import guarantees
from pipelines.engine.rehearsal import kafka_rows, kafka_schema
from pipelines.usage import job as usage

PROVIDER = "spark.sql.streaming.stateStore.providerClass"


@pytest.fixture
def usage_conf(spark, settings):
    """The usage application's settings on the shared test session, restored afterwards."""
    before = {k: spark.conf.get(k) for k in usage.spark_conf(settings)}
    yield lambda s: [spark.conf.set(k, v) for k, v in usage.spark_conf(s).items()]
    for k, v in before.items():
        spark.conf.set(k, v)


def send(spark, folder: str, ids: list[str]) -> None:
    """Decisions for `ids` (a txn_id ending in "f" is fraud) as Kafka's rows, into the folder read."""
    now = int(time.time() * 1000)
    records = [(i.encode(), json.dumps({"txn_id": i, "card_id": "card-1", "event_time": now - 1_000,
                                        "is_fraud": i.endswith("f")}).encode()) for i in ids]
    spark.createDataFrame(kafka_rows(records, now), kafka_schema()).write.mode("append").parquet(folder)


def run_once(spark, s, folder: str, checkpoint: str) -> tuple[int, int]:
    """One availableNow run of exactly-once's plan over `folder`: (decisions, fraud) it counted."""
    source = spark.readStream.schema(kafka_schema()).parquet(folder)
    got = [0, 0]

    def handle(df, _):
        row = df.agg(*usage.count_columns()).collect()[0]
        got[0] += row["n"]
        got[1] += row["f"]

    q = (usage.counted_stream(source, s, guarantees.policy("exactly-once")).writeStream
         .foreachBatch(handle).option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination(240)
    assert q.exception() is None
    return got[0], got[1]


def provider_of(checkpoint: str, batch: int) -> str:
    with open(f"{checkpoint}/offsets/{batch}") as f:
        return json.loads(f.read().splitlines()[1])["conf"][PROVIDER]


def test_a_checkpoint_keeps_its_store_and_its_state_across_the_switch(spark, settings, tmp_path, usage_conf):
    folder, checkpoint = str(tmp_path / "in"), str(tmp_path / "checkpoint")
    send(spark, folder, ["a", "b", "cf"])
    usage_conf(dataclasses.replace(settings, usage_state_store="rocksdb"))
    assert run_once(spark, settings, folder, checkpoint) == (3, 1)

    # the job restarted with the in-place store: the checkpoint still remembers "b" and "cf"
    send(spark, folder, ["b", "cf", "d", "ef"])
    usage_conf(dataclasses.replace(settings, usage_state_store="inplace"))
    assert spark.conf.get(PROVIDER) == STATE_STORES["inplace"]
    assert run_once(spark, settings, folder, checkpoint) == (2, 1)
    assert provider_of(checkpoint, 0) == provider_of(checkpoint, 1) == STATE_STORES["rocksdb"]


@pytest.mark.parametrize("kind", ["inplace", "memory"])
def test_a_new_checkpoint_takes_the_configured_store_and_dedupes_in_it(spark, settings, tmp_path, usage_conf, kind):
    folder, checkpoint = str(tmp_path / "in"), str(tmp_path / "checkpoint")
    send(spark, folder, ["a", "bf", "a"])
    usage_conf(dataclasses.replace(settings, usage_state_store=kind))
    assert run_once(spark, settings, folder, checkpoint) == (2, 1)
    send(spark, folder, ["bf", "c"])
    assert run_once(spark, settings, folder, checkpoint) == (1, 0)
    assert provider_of(checkpoint, 1) == STATE_STORES[kind]
