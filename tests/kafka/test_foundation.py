"""The foundation: a real broker, the store, and Kafka -> Spark Structured Streaming -> SQLite."""
from __future__ import annotations

import json
import subprocess

from kafka import KafkaProducer

from infra import broker
from pipelines.engine.sources import parse_transactions, read_kafka


def test_broker_is_a_real_kafka_process(kafka, settings):
    host, port = kafka.split(",")[0].rsplit(":", 1)
    assert broker.api_versions(host, int(port)) > 40  # a real broker lists dozens of APIs
    if not settings.external_bootstrap:
        pids = broker.broker_pids(settings)
        assert pids, "no broker process found"
        cmdline = subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(pids[0])], capture_output=True,
                                 text=True).stdout
        assert "java" in cmdline and "kafka.Kafka" in cmdline


def test_broker_up_is_idempotent(kafka, settings):
    before = broker.broker_pids(settings)
    assert broker.up(settings, quiet=True) == kafka
    assert broker.broker_pids(settings) == before


def test_store_is_wal_and_owns_its_tables(store):
    assert store.journal_mode == "wal"
    assert {"decisions", "commands", "usage_counts", "batch_progress"} <= set(store.table_names())
    assert store["decisions"].pks == ["txn_id"]


def _transactions(n):
    return [{"txn_id": f"tx-{i}", "card_id": f"card-{i % 7}", "merchant_id": f"m-{i % 3}",
             "amount_cents": 100 + i, "currency": "EUR", "lat": 52.0 + i / 100, "lon": 4.0,
             "event_time": 1_700_000_000_000 + i, "produced_at": 1_700_000_000_000 + i}
            for i in range(n)]


def test_streaming_query_lands_kafka_json_in_the_store(kafka, spark, topic, store, tmp_path):
    name = topic("smoke")
    sent = _transactions(50)
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all",
                             value_serializer=lambda v: json.dumps(v).encode())
    for txn in sent:
        producer.send(name, key=txn["card_id"].encode(), value=txn)
    producer.send(name, value={"txn_id": "bad", "amount_cents": "lots"})
    producer.flush()
    producer.close()

    def land(batch, batch_id):
        rows = [r.asDict() for r in batch.collect()]
        good = [{k: v for k, v in r.items() if k in store["transactions_raw"].columns_dict}
                for r in rows if r["dlq_reason"] is None]
        with store.conn:
            store["transactions_raw"].upsert_all(good, pk="txn_id")
        bad.extend(r["dlq_reason"] for r in rows if r["dlq_reason"] is not None)

    bad: list[str] = []
    query = (parse_transactions(read_kafka(spark, name))
             .writeStream.foreachBatch(land)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None

    landed = sorted(store["transactions_raw"].rows, key=lambda r: int(r["txn_id"].split("-")[1]))
    assert landed == sent
    assert bad == ["missing field card_id"]
