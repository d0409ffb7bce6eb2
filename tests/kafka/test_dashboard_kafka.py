"""The dashboard's one Kafka module against the real broker: end offsets (and the consumer lag
the Overview shows from them), and the broker probe."""
from __future__ import annotations

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
