"""`python -m simulator` as a real process against the real broker, read back with KafkaConsumer.

Stated tolerances for 6,000 messages: fraud share +-0.03 of --fraud-rate (card-testing bursts of
~13 come in clumps: ~3 standard deviations), late and bad shares +-0.015.
"""
from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid

from kafka.admin import NewTopic

from controlplane import commands
from controlplane.store import connect
from infra import kafka_client
from infra.config import ROOT
from infra.contracts import dead_letter_reason
from infra.partitioner import partitions_for
from simulator import patterns as P
from simulator.producer import Producer
from simulator.stream import Stream
from tests.harness.topics import read_all

CREATE_TIME, LOG_APPEND_TIME = 0, 1  # a Kafka record's timestamp_type
FRAUD = set(P.FRAUD_PATTERNS)


def held(topic: str) -> int:
    """How many records the topic holds (the sum of its end offsets)."""
    return sum(kafka_client.end_offsets(topic).values())


def env(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def simulate(tx: str, labels: str, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simulator", "--topic", tx, "--labels-topic", labels,
                           "--no-control", "--progress-seconds", "0", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=180, env=env(**kw))


@contextlib.contextmanager
def running(tx: str, labels: str, *args: str, **kw):
    """A simulator left running while the test steers it (killed at the end if it still runs)."""
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "--topic", tx, "--labels-topic", labels, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env(**kw))
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()


def stopped(proc) -> tuple[dict, str]:
    """SIGTERM, as a user stops it: (its totals, the last line on stdout; its stderr), once it exits 0."""
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


def without_stamp(value: bytes) -> dict:
    doc = json.loads(value)
    doc.pop("produced_at")
    return doc


def test_count_and_seed_give_exactly_the_seeded_stream(kafka, topic):
    # event times start now (the same for both runs): older ones would be dead letters by age
    start_ms = int(time.time() * 1000) // 1000 * 1000
    args = ["--count", "6000", "--seed", "42", "--fraud-rate", "0.1", "--late-rate", "0.05",
            "--bad-rate", "0.05", "--late-lag-ms", "300", "--start-ms", str(start_ms)]
    runs = []
    for _ in range(2):
        tx, labels = topic("sim-tx"), topic("sim-labels")
        proc = simulate(tx, labels, *args)
        assert proc.returncode == 0, proc.stderr
        totals = json.loads(proc.stdout.strip().splitlines()[-1])
        assert totals["sent"] == totals["labels_sent"] == 6000 and totals["failed"] == 0
        runs.append((read_all(tx), read_all(labels)))

    (tx_a, labels_a), (tx_b, labels_b) = runs
    assert len(tx_a) == len(labels_a) == len(tx_b) == len(labels_b) == 6000
    # same seed, same stream: partition by partition, offset by offset (produced_at aside)
    # valid as the fraud job sees it when the record arrives (the time window included)
    valid = lambda r: dead_letter_reason(r.value, now_ms=r.timestamp) is None  # noqa: E731
    assert [(r.partition, r.key, without_stamp(r.value) if valid(r) else r.value) for r in tx_a] == \
           [(r.partition, r.key, without_stamp(r.value) if valid(r) else r.value) for r in tx_b]
    assert [(r.partition, r.key, r.value) for r in labels_a] == [(r.partition, r.key, r.value) for r in labels_b]
    # ... and it is the stream the generator makes for that seed, transaction by transaction
    expected = {e.txn_id: e for e in Stream(42, 1000.0, fraud_rate=0.1, late_rate=0.05, bad_rate=0.05,
                                            late_lag_ms=300, start_ms=start_ms, count=6000)}
    label_docs = {json.loads(r.value)["txn_id"]: json.loads(r.value) for r in labels_a}
    assert set(label_docs) == set(expected) and all(r.key.decode() in expected for r in labels_a)
    for r in tx_a:
        if valid(r):
            doc = json.loads(r.value)
            e = expected[doc["txn_id"]]
            assert doc == json.loads(e.value(doc["produced_at"])) and r.key == e.key
            # the topic stamps records with the broker's clock (infra.topics): appended after the send
            assert r.timestamp_type == LOG_APPEND_TIME and -5 <= r.timestamp - doc["produced_at"] < 30_000
        else:
            assert r.value in {e.payload for e in expected.values() if e.payload is not None}
    patterns = collections.Counter(d["pattern"] for d in label_docs.values())
    fraud = sum(d["is_fraud"] for d in label_docs.values()) / 6000
    late = sum(d["is_late"] for d in label_docs.values()) / 6000
    bad = sum(p.startswith("bad:") for p in (d["pattern"] for d in label_docs.values())) / 6000
    assert abs(fraud - 0.1) <= 0.03 and abs(late - 0.05) <= 0.015 and abs(bad - 0.05) <= 0.015, patterns
    assert {p for p in patterns if p in FRAUD} >= {P.TRAVEL, P.TESTING}


def test_sigterm_mid_run_flushes_everything_counted_as_sent(kafka, topic):
    tx, labels = topic("sim-tx"), topic("sim-labels")
    with running(tx, labels, "--rate", "4000", "--no-control", "--progress-seconds", "1", "--late-rate", "0.05",
                 "--late-lag-ms", "200") as proc:
        deadline = time.monotonic() + 60
        while held(tx) < 5000 and time.monotonic() < deadline:
            time.sleep(0.3)
        totals, err = stopped(proc)
    assert "Traceback" not in err
    assert totals["sent"] >= 5000 and totals["failed"] == 0 and totals["unacknowledged"] == 0
    assert held(tx) == totals["sent"]
    assert held(labels) == totals["labels_sent"] == totals["sent"]


def test_commands_from_the_store_steer_a_running_simulator(kafka, topic, tmp_path):
    tx, labels = topic("sim-tx"), topic("sim-labels")
    db_path = tmp_path / "store.db"
    db = connect(db_path)

    def run(kind, **params):
        cid = commands.issue(db, kind, "simulator", **params)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            row = db["commands"].get(cid)
            if row["status"] in ("done", "failed"):
                return row
            time.sleep(0.1)
        raise AssertionError(f"{kind} was not carried out: {db['commands'].get(cid)}")

    with running(tx, labels, "--rate", "400", "--fraud-rate", "0", "--late-rate", "0", "--late-lag-ms", "300",
                 "--progress-seconds", "0", CARDSTREAM_DB=str(db_path)) as proc:
        assert run("bad-input", count=25)["status"] == "done"
        assert run("late-burst", count=40)["status"] == "done"
        refused = run("set-rate", rate=0)
        assert refused["status"] == "failed" and "positive" in refused["result"]
        time.sleep(1.5)  # the late ones are held back 0.3-0.6 s
        assert run("pause")["status"] == "done"
        time.sleep(0.5)
        before = held(tx)
        time.sleep(1.5)
        assert held(tx) == before  # nothing is sent while paused
        assert run("resume")["status"] == "done"
        assert run("set-rate", rate=1500)["status"] == "done"
        time.sleep(1.0)
        assert held(tx) > before
        totals, _ = stopped(proc)
    docs = [json.loads(r.value) for r in read_all(labels)]
    assert len(docs) == totals["labels_sent"] == held(tx) == totals["sent"]
    assert sum(d["pattern"].startswith("bad:") for d in docs) == 25
    assert sum(d["is_late"] for d in docs) == 40
    assert not any(d["is_fraud"] for d in docs)


def test_both_producer_paths_deliver_every_record_once_where_kafka_would_put_it(kafka, topic):
    for bulk in (True, False):
        # a topic that keeps the producer's own timestamps (CreateTime), unlike CardStream's
        # topics, so the stamp the bulk path encodes by hand is checked too
        name = f"sim-producer-{uuid.uuid4().hex[:10]}"
        admin = kafka_client.admin()
        admin.create_topics([NewTopic(name, 3, 1, topic_configs={"message.timestamp.type": "CreateTime"})])
        admin.close()
        producer = Producer(kafka, bulk=bulk)
        assert producer.bulk is bulk
        stamp = int(time.time() * 1000)
        keys = [b"c%07d" % (i % 97) for i in range(1500)]
        for start in range(0, 1500, 500):
            producer.send_many(name, keys[start:start + 500],
                               [b'{"n":%d}' % i for i in range(start, start + 500)], stamp)
        producer.flush()
        totals = producer.totals(name)
        producer.close()
        assert (totals.appended, totals.sent, totals.failed) == (1500, 1500, 0)
        records = read_all(name)
        assert sorted(json.loads(r.value)["n"] for r in records) == list(range(1500))
        expected = dict(zip(keys, partitions_for(keys, 3).tolist()))
        assert all(r.partition == expected[r.key] and r.timestamp == stamp and r.timestamp_type == CREATE_TIME
                   for r in records)
        # order within a partition is the order of appending
        for p in range(3):
            ns = [json.loads(r.value)["n"] for r in records if r.partition == p]
            assert ns == sorted(ns)
