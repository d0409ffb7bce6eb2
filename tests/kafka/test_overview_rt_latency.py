"""The Overview's decision latency on the real broker, on the bench's clocks (issue 36 item 4): a
decision's append time on its topic minus its transaction's append time on the transactions topic,
both stamped by the broker (LogAppendTime), as `bench latency` measures. The stateful path's
decisions (`decisions`) and the real-time path's (`decisions-rt`, in Kafka only) are read with their
transactions; the real-time warm-up (in Kafka before its query last started, decided after) is left
out. Every expected figure is computed here from the records read back with a plain consumer."""
from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest
from kafka.admin import NewTopic
from streamlit.testing.v1 import AppTest

from controlplane.clock import now_ms
from controlplane.store import connect
from dashboard import fmt
from dashboard.data import kafka as dkafka, overview
from infra import kafka_client
from infra.config import load
from tests.harness import append_times
from tests.harness.append_times import decision, transaction
from tests.harness.dashboard_seed import seed_store

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


def latencies(s, tx: str, dec: str) -> pd.Series:
    """decision appended - transaction appended per txn_id, from the records themselves."""
    return pd.Series(append_times.latencies(s, tx, dec), dtype="int64")


def test_latency_on_the_broker_s_clock(kafka, topic, tmp_path, monkeypatch):
    tx, dec, rt = topic("transactions", partitions=2), topic("decisions", partitions=2), topic("decisions-rt", partitions=2)
    for name, value in {"KAFKA_BOOTSTRAP": kafka, "TOPIC_TRANSACTIONS": tx, "TOPIC_DECISIONS": dec,
                        "TOPIC_DECISIONS_RT": rt, "CARDSTREAM_DB": str(tmp_path / "d.db"),
                        "CHECKPOINT_ROOT": str(tmp_path / "checkpoints"), "DASHBOARD_HOST": "127.0.0.1"}.items():
        monkeypatch.setenv(name, value)
    s = load()
    producer = kafka_client.producer(s, linger_ms=5)
    produced = now_ms()           # the simulator's stamp, before each send
    for i in range(20):           # reached Kafka while the real-time query was starting
        producer.send(tx, transaction(f"w-{i}", produced), partition=i % 2)
    producer.flush()
    started = now_ms() + 1        # the real-time query's start, as the job records it
    time.sleep(0.02)
    for i in range(300):          # then the transactions the query reads once started
        producer.send(tx, transaction(f"t-{i}", produced), partition=i % 2)
    producer.flush()              # a decision reaches Kafka after its transaction
    for i in range(20):           # the warm-up's decisions, after the query started
        producer.send(rt, decision(f"w-{i}", produced), partition=i % 2)
    for i in range(300):          # and every transaction's on both paths
        producer.send(rt, decision(f"t-{i}", produced), partition=i % 2)
        producer.send(dec, decision(f"t-{i}", produced), partition=i % 2)
    producer.send(dec, decision("never-sent", produced), partition=0)   # its transaction is in no topic
    producer.flush()
    producer.close()

    db = connect(tmp_path / "d.db")
    seed_store(db, now_ms())
    db["fraud_rt_runs"].insert({"started_at": started, "guarantee": "at-most-once", "resumed": 0, "epoch": 1,
                                "pid": 4100})
    db.conn.close()

    found = dkafka.append_latencies(s, rt, tx)
    want = latencies(s, tx, rt)
    assert sorted(d - t for t, d in found.pairs) == sorted(want.tolist()) and found.unmatched == 0
    steady, warm = overview.split_warmup(overview.latency_frame(found.pairs), started)
    assert len(warm) == 20 and len(steady) == 300
    assert sorted(steady["latency_ms"]) == sorted(want[[f"t-{i}" for i in range(300)]].tolist())
    stateful = dkafka.append_latencies(s, dec, tx)
    assert stateful.unmatched == 1 and len(stateful.pairs) == 300   # the decision without a transaction
    newest = dkafka.append_latencies(s, dec, tx, limit=100)                  # the newest 50 per partition
    assert len(newest.pairs) + newest.unmatched == 100

    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    captions = "\n".join(c.value for c in at.caption)
    rt_ms = want[[f"t-{i}" for i in range(300)]].astype(float)
    assert "Real-time path: the newest 300 decisions" in captions and "20 of the warm-up" in captions
    assert f"p99 {fmt.duration_ms(float(rt_ms.quantile(0.99)))}" in captions
    assert "Stateful path" in captions and f"1 of the newest decisions of `{dec}` are left out" in captions
    assert "Kafka append time minus its transaction's" in captions
    assert not at.error, [e.value for e in at.error]
    dec_ms = latencies(s, tx, dec).astype(float)
    tiles = {m.label: m.value for m in at.metric}
    # the lease holder (the seeded epoch 1) started the real-time query: the tiles are its path's,
    # without its warm-up, and the stateful path's figures are said beside them (the seeded store's
    # fraud batches are older than these records: no stateful warm-up)
    assert tiles["Latency p99"] == fmt.duration_ms(float(rt_ms.quantile(0.99)))
    assert tiles["Latency p50"] == fmt.duration_ms(float(rt_ms.quantile(0.5)))
    assert (f"p50 {fmt.duration_ms(float(dec_ms.quantile(0.5)))}, p99 {fmt.duration_ms(float(dec_ms.quantile(0.99)))}"
            " over its newest 300 decisions") in captions


def test_a_topic_stamped_with_the_producers_clocks_is_refused(kafka, topic, settings):
    """Latency across producers' clocks is not the bench's figure: such a topic is said, not used."""
    tx = topic("transactions")
    created = f"decisions-createtime-{now_ms()}"
    admin = kafka_client.admin(settings)
    try:
        admin.create_topics([NewTopic(created, 1, 1, topic_configs={"message.timestamp.type": "CreateTime"})])
    finally:
        admin.close()
    producer = kafka_client.producer(settings)
    produced = now_ms()
    producer.send(tx, transaction("t-1", produced))
    producer.send(created, decision("t-1", produced))
    producer.flush()
    producer.close()
    with pytest.raises(dkafka.NotAppendTime, match="producers' clocks"):
        dkafka.append_latencies(settings, created, tx)
