"""The foundation: a real broker, and Kafka -> Spark Structured Streaming -> SQLite."""
from __future__ import annotations

import json
import subprocess
import time

from controlplane.store import transaction
from infra import broker, kafka_client
from infra.contracts import TRANSACTION_FIELDS
from pipelines.engine.sources import parse_transactions, read_kafka

FIELDS = dict(TRANSACTION_FIELDS)  # the test's own landing table: the store has no raw transactions


def test_broker_is_a_real_kafka_process(kafka, settings):
    host, port = kafka.split(",")[0].rsplit(":", 1)
    assert kafka_client.api_versions(host, int(port)) > 40  # a real broker lists dozens of APIs
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


def _transactions(n):
    """Valid transactions stamped now (times outside the validation window are dead letters)."""
    now = int(time.time() * 1000)
    return [{"txn_id": f"tx-{i}", "card_id": f"card-{i % 7}", "merchant_id": f"m-{i % 3}",
             "amount_cents": 100 + i, "currency": "EUR", "lat": 52.0 + i / 100, "lon": 4.0,
             "event_time": now - 1000 + i, "produced_at": now}
            for i in range(n)]


def test_streaming_query_lands_kafka_json_in_the_store(kafka, spark, topic, store, settings, tmp_path):
    name = topic("smoke")
    sent = _transactions(50)
    producer = kafka_client.producer(settings, acks="all")
    for txn in sent:
        producer.send(name, key=txn["card_id"].encode(), value=json.dumps(txn).encode())
    producer.send(name, value=json.dumps({"txn_id": "bad", "amount_cents": "lots"}).encode())
    stale = dict(sent[0], txn_id="stale", event_time=sent[0]["event_time"] - 30 * 24 * 3_600_000)
    producer.send(name, value=json.dumps(stale).encode())  # a month old: outside the window
    producer.flush()
    producer.close()

    def land(batch, batch_id):
        rows = [r.asDict() for r in batch.collect()]
        good = [{k: r[k] for k in FIELDS} for r in rows if r["dlq_reason"] is None]
        with transaction(store):
            store["landed"].upsert_all(good, pk="txn_id", columns=FIELDS)
        bad.extend(r["dlq_reason"] for r in rows if r["dlq_reason"] is not None)

    bad: list[str] = []
    query = (parse_transactions(read_kafka(spark, name, settings))
             .writeStream.foreachBatch(land)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None

    landed = sorted(store["landed"].rows, key=lambda r: int(r["txn_id"].split("-")[1]))
    assert landed == sent
    assert len(bad) == 2 and "missing field card_id" in bad
    [stale_reason] = [r for r in bad if r != "missing field card_id"]
    assert "event_time" in stale_reason and "past" in stale_reason, stale_reason


def test_read_to_end_stops_at_the_end_it_took_and_at_an_open_transaction(topic, settings):
    """kafka_client.read_to_end, which every test reading a topic back uses: committed records past
    their commit markers, not an open transaction's (read_committed stops at the last stable offset
    instead of waiting for it), and not what comes after its end offsets were taken."""
    t = topic("read-to-end", partitions=2)
    committed = kafka_client.producer(settings, transactional_id=f"{t}-a", enable_idempotence=True)
    committed.init_transactions()
    committed.begin_transaction()
    for i in range(30):
        committed.send(t, f"c-{i}".encode(), partition=i % 2)
    committed.commit_transaction()
    committed.close()
    open_txn = kafka_client.producer(settings, transactional_id=f"{t}-b", enable_idempotence=True)
    open_txn.init_transactions()
    open_txn.begin_transaction()
    open_txn.send(t, b"open", partition=0)
    open_txn.flush()
    try:
        got = kafka_client.read_to_end(t, settings, timeout_s=30)
        assert sorted(r.value for r in got) == sorted(f"c-{i}".encode() for i in range(30))
        everything = kafka_client.read_to_end(t, settings, timeout_s=30, isolation_level="read_uncommitted")
        assert b"open" in {r.value for r in everything} and len(everything) == 31
    finally:
        open_txn.abort_transaction()
        open_txn.close()
    assert len(kafka_client.read_to_end(t, settings, timeout_s=30)) == 30   # the aborted one never shows
