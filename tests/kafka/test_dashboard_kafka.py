"""The dashboard's one Kafka module against the real broker: end offsets (and the consumer lag
the Overview shows from them), and the broker probe."""
from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from controlplane.clock import now_ms
from controlplane.store import connect
from dashboard.data import kafka as dkafka, overview
from infra import kafka_client
from infra.config import load
from tests.harness.dashboard_seed import seed_store

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


def test_end_offsets_from_the_real_broker(kafka, topic, monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka)
    s = load()
    name = topic("lag", partitions=2)
    producer = kafka_client.producer(s)
    for i in range(7):
        producer.send(name, b"x", partition=i % 2)
    producer.flush()
    producer.close()
    assert dkafka.answers(s)
    assert dkafka.end_offsets(s, [name, "no-such-topic-here"]) == {name: {0: 4, 1: 3}}


def test_overview_shows_consumer_lag_from_the_real_broker(kafka, topic, tmp_path, monkeypatch):
    topics = {"transactions": topic("transactions", partitions=2), "decisions": topic("decisions", partitions=2)}
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka)
    monkeypatch.setenv("CARDSTREAM_DB", str(tmp_path / "dash.db"))
    monkeypatch.setenv("CHECKPOINT_ROOT", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("DASHBOARD_HOST", "127.0.0.1")
    db = connect(tmp_path / "dash.db")
    seeded = seed_store(db, now_ms(), topics)
    db.conn.close()
    producer = kafka_client.producer(load())
    for i in range(6):
        producer.send(topics["decisions"], f"d{i}".encode(), partition=i % 2)
    producer.flush()
    producer.close()
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    assert any("Kafka up" in e.value for e in at.sidebar.success)
    lag = next(d.value for d in at.dataframe if "lag" in d.value.columns)
    assert set(lag["topic"]) == set(topics.values())
    usage = lag[lag["topic"] == topics["decisions"]].set_index("query")
    # Kafka ends at 3 + 3; the seeded batches got further: no lag (never negative)
    assert (usage["kafka_end"] == 6).all() and (usage["lag"] == 0).all()
    assert set(usage.index) == {"usage-windows", *(f"usage-{g}" for g in seeded.final)}
    fraud = lag[lag["topic"] == topics["transactions"]].set_index("query")
    assert fraud.loc["fraud", "kafka_end"] == 0 and fraud.loc["fraud", "lag"] == 0
    assert overview.lag_topics(overview.last_batch_offsets(connect(tmp_path / "dash.db"))) == sorted(topics.values())


def test_the_lag_s_kafka_end_is_never_behind_a_batch_shown_beside_it(kafka, topic, tmp_path, monkeypatch):
    """Kafka's ends are cached a few seconds; a batch committed since must not be shown past an end
    read before it (a query "ahead of Kafka"): a newer batch reads the ends again."""
    name = topic("decisions", partitions=1)
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka)
    monkeypatch.setenv("CARDSTREAM_DB", str(tmp_path / "dash.db"))
    monkeypatch.setenv("CHECKPOINT_ROOT", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("DASHBOARD_HOST", "127.0.0.1")
    db = connect(tmp_path / "dash.db")
    producer = kafka_client.producer(load())

    def sent_and_batch(n: int, batch_id: int) -> None:
        for i in range(n):
            producer.send(name, f"d{batch_id}-{i}".encode(), partition=0)
        producer.flush()
        end = sum(kafka_client.end_offsets(name, load()).values())
        db["batch_progress"].insert({"query": "usage-exactly-once", "batch_id": batch_id, "ts": now_ms(),
                                     "num_input_rows": n, "end_offsets": json.dumps([json.dumps({name: {"0": end}})])})

    def shown() -> tuple[int, int]:
        at = AppTest.from_file(APP, default_timeout=60)
        at.run()
        assert not at.exception
        lag = next(d.value for d in at.dataframe if "lag" in d.value.columns).set_index("query")
        return int(lag.loc["usage-exactly-once", "kafka_end"]), int(lag.loc["usage-exactly-once", "processed"])

    try:
        sent_and_batch(5, 0)
        assert shown() == (5, 5)
        sent_and_batch(4, 1)        # within the cache's seconds
        assert shown() == (9, 9)    # not (5, 9): the end read again after the newer batch
    finally:
        producer.close()
        db.conn.close()
