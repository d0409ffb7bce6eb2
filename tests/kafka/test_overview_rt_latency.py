"""The Overview's latency per path on the real broker: the real-time path's decisions live only in
Kafka (decisions-rt); the page reads the newest of them, leaves out the ones produced before its
query last started (fraud_rt_runs), and draws their histogram beside the stateful path's."""
from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from controlplane.clock import now_ms
from controlplane.store import connect
from dashboard.data import kafka as dkafka, overview
from infra import kafka_client
from infra.config import load
from infra.contracts import ANALYZERS
from tests.harness.dashboard_seed import seed_store

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


def decision(i: int, produced_at: int, decided_at: int) -> bytes:
    """A decisions-rt record as the real-time query writes it (DECISION_FIELDS as JSON)."""
    return json.dumps({"txn_id": f"txn-{i:06d}", "card_id": f"card-{i % 97:03d}", "merchant_id": f"m-{i % 13}",
                       "amount_cents": 1_000 + i, "event_time": produced_at - 40, "produced_at": produced_at,
                       "decided_at": decided_at, **{f"score_{a}": 0.1 for a in ANALYZERS}, "score": 0.1,
                       "is_fraud": False, "is_late": False}).encode()


def test_real_time_latency_from_kafka(kafka, topic, tmp_path, monkeypatch):
    rt = topic("decisions-rt", partitions=2)
    for name, value in {"KAFKA_BOOTSTRAP": kafka, "TOPIC_DECISIONS_RT": rt, "CARDSTREAM_DB": str(tmp_path / "d.db"),
                        "CHECKPOINT_ROOT": str(tmp_path / "checkpoints"), "DASHBOARD_HOST": "127.0.0.1"}.items():
        monkeypatch.setenv(name, value)
    s = load()
    now = now_ms()
    db = connect(tmp_path / "d.db")
    seed_store(db, now)
    started = now - 60_000      # the real-time query's start, as the job records it
    db["fraud_rt_runs"].insert({"started_at": started, "guarantee": "at-most-once", "resumed": 0, "epoch": 1,
                                "pid": 4100})
    db.conn.close()
    producer = kafka_client.producer(s)
    for i in range(20):         # arrived while the query was starting: decided 1.5 s after its start
        producer.send(rt, decision(i, started - 2_000 + i * 50, started + 1_500), partition=i % 2)
    for i in range(20, 320):    # then 8-11 ms after production
        p = started + 2_000 + i * 25
        producer.send(rt, decision(i, p, p + 8 + i % 4), partition=i % 2)
    producer.flush()
    producer.close()

    pairs = dkafka.recent_latencies(s, rt, limit=2000)
    assert len(pairs) == 320
    frame, warm = overview.rt_latencies(pairs, started)
    assert warm == 20 and len(frame) == 300 and frame["latency_ms"].between(8, 11).all()
    assert len(dkafka.recent_latencies(s, rt, limit=100)) == 100       # the newest 50 per partition

    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    captions = "\n".join(c.value for c in at.caption)
    assert "Real-time path: the newest 300 decisions" in captions and "p99 11 ms" in captions
    assert "100.0 % within 20 ms" in captions and "20 of the warm-up" in captions
    assert "Stateful path" in captions
