"""No input can stop a job (issue 15), on the real broker with real job processes.

The simulator's whole malformed corpus (every kind of `simulator.patterns.BAD_KINDS`: shapes,
encodings, NaN/Infinity, types, ids, clock units, far past and future, duplicate names, sizes up
to a 900 KB body and 200 KB of invalid UTF-8) is sent into a running fraud job: each message
lands in the dead-letter topic with its kind's reason, its size and its first bytes; the job
neither fails nor restarts a query; good transactions sent after the corpus are decided. Then
the same for the usage job with malformed decisions: none is counted, the good ones are, once.
"""
from __future__ import annotations

import base64
import json
import re
import time

import numpy as np

from controlplane import store
from infra import kafka_client
from infra.contracts import DEAD_LETTER_HEAD_BYTES
from simulator import patterns as P
from bench.harness.jobs import JobProcess, counts, job_env, wait_for

FRAUD_READY = re.compile(r"\bfraud INFO \w+ mode, epoch")
TROUBLE = re.compile(r"failed \(|restarting it|giving up|Traceback|exits? (with|without)|OutOfMemory")


def now_ms() -> int:
    return int(time.time() * 1000)


def txn(txn_id: str, card: str, t: int) -> dict:
    return {"txn_id": txn_id, "card_id": card, "merchant_id": "m-1", "amount_cents": 2_500, "currency": "EUR",
            "lat": 48.8566, "lon": 2.3522, "event_time": t, "produced_at": now_ms()}


def send(producer, topic: str, records: list[dict]) -> None:
    for r in records:
        producer.send(topic, key=r["card_id"].encode(), value=json.dumps(r).encode())
    producer.flush()


def rows(path, sql):
    db = store.connect(path)
    try:
        return [dict(r) for r in db.query(sql)]
    finally:
        db.conn.close()


def corpus(t: int) -> list[tuple[str, bytes]]:
    """(kind, payload): every kind once, the five that vary at random three times each."""
    rng = np.random.default_rng(15)
    out = []
    for i, kind in enumerate(P.BAD_KINDS):
        for j in range(3 if kind in P.RANDOM_KINDS else 1):
            fields = {**txn(f"bad-{i}-{j}", f"card-bad-{i}", t), "produced_at": t}
            out.append((kind, P.malformed(fields, kind, rng)[0]))
    return out


def head_of(letter: dict) -> bytes:
    raw = letter["raw"]
    return base64.b64decode(raw) if letter.get("raw_encoding") == "base64" else raw.encode()


def test_the_whole_corpus_is_dead_lettered_and_the_fraud_job_keeps_deciding(kafka, topic, tmp_path, settings):
    tx, dec, dlq = topic("tx"), topic("dec"), topic("dlq")
    db_path = tmp_path / "cardstream.db"
    args = ["--transactions-topic", tx, "--decisions-topic", dec, "--dlq-topic", dlq,
            "--markers-topic", topic("marks"), "--realtime-topic", topic("rt"),
            "--checkpoint", str(tmp_path / "checkpoint"), "--store", str(db_path), "--trigger-seconds", "0.5"]
    job = JobProcess(job_env(tmp_path, dec, {"CARDSTREAM_DB": str(db_path)}), args, module="pipelines.fraud",
                     ready=FRAUD_READY)
    producer = kafka_client.producer(settings, acks="all", max_request_size=2 * 1024 * 1024)
    decided = lambda: rows(db_path, "SELECT txn_id FROM decisions")  # noqa: E731
    job.start(timeout=240)
    try:
        # the job is deciding before the corpus arrives
        send(producer, tx, [txn(f"warm-{i}", f"card-warm-{i}", now_ms() - 2_000) for i in range(5)])
        wait_for(lambda: len(decided()) >= 5, 180, "the first decisions")

        sent = {}  # (partition, offset) -> (kind, payload)
        for kind, payload in corpus(now_ms()):
            meta = producer.send(tx, value=payload, partition=0).get(timeout=30)
            sent[(meta.partition, meta.offset)] = (kind, payload)
        good = [txn(f"good-{i}", f"card-good-{i}", now_ms() - 1_000) for i in range(20)]
        send(producer, tx, good)

        wait_for(lambda: {"good-%d" % i for i in range(20)} <= {r["txn_id"] for r in decided()}, 240,
                 "the good transactions sent after the corpus to be decided")
        letters = wait_for(lambda: (lambda got: got if len(got) >= len(sent) else None)(
                               kafka_client.read_to_end(dlq)), 180, "every malformed message in the dead-letter topic")
        assert job.proc.poll() is None, "the job stopped:\n" + "\n".join(job.lines[-40:])
    finally:
        producer.close()
        job.stop()
    assert job.proc.returncode == 0, "\n".join(job.lines[-40:])
    trouble = [line for line in job.lines if TROUBLE.search(line)]
    assert not trouble, trouble  # no query failed, none was restarted

    assert len(sent) >= 30 + 10 and len(letters) == len(sent)  # each exactly once
    wrong = []
    for message in letters:
        letter = json.loads(message.value)
        kind, payload = sent[(letter["partition"], letter["offset"])]
        expected = P.BAD_REASONS[kind]
        if not (expected in letter["reason"] if kind in P.RANDOM_KINDS else letter["reason"] == expected):
            wrong.append((kind, letter["reason"], expected))
        assert letter["topic"] == tx and letter["raw_bytes"] == len(payload)
        assert letter["raw_truncated"] == (len(payload) > DEAD_LETTER_HEAD_BYTES)
        assert payload.startswith(head_of(letter)) and len(head_of(letter)) >= min(len(payload), DEAD_LETTER_HEAD_BYTES) - 3
        assert len(message.value) < 7 * DEAD_LETTER_HEAD_BYTES  # a 900 KB body makes a small dead letter
    assert not wrong, wrong
    assert {json.loads(m.value)["reason"] for m in letters} >= {"invalid UTF-8", "event_time in nanoseconds",
                                                                "oversized payload", "duplicate field"}
    ids = [r["txn_id"] for r in rows(db_path, "SELECT txn_id FROM decisions")]
    assert sorted(ids) == sorted([f"warm-{i}" for i in range(5)] + [g["txn_id"] for g in good])
    assert sum(r["count"] for r in rows(db_path, "SELECT count FROM dead_letters")) == len(sent)


def test_malformed_decisions_are_not_counted_and_the_usage_job_keeps_counting(kafka, topic, tmp_path, settings):
    dec = topic("dec")
    now = now_ms()
    good = [{"txn_id": f"d-{i}", "card_id": f"c-{i % 3}", "event_time": now - 1_000, "is_fraud": i % 4 == 0}
            for i in range(12)]
    base = {"txn_id": "x", "card_id": "c-1", "event_time": now - 1_000, "is_fraud": False}
    bad = [b"", b"{oops", b"\xff\xfe{}", b"[1,2]", b'{"txn_id":"a","txn_id":"b"}', b"x" * 20_000,
           json.dumps({**base, "txn_id": ""}).encode(), json.dumps({**base, "txn_id": 42}).encode(),
           json.dumps({k: v for k, v in base.items() if k != "txn_id"}).encode(),
           json.dumps({**base, "card_id": {"id": 1}}).encode(), json.dumps({**base, "is_fraud": "no"}).encode(),
           json.dumps({**base, "event_time": now * 1_000_000}).encode(),
           json.dumps({**base, "event_time": now // 1_000}).encode(),
           json.dumps({**base, "event_time": now + 86_400_000}).encode(),
           json.dumps({**base, "event_time": 2 ** 70}).encode()]
    # all guarantees and the windows; at-most-once reads from where the topic ends at its start
    job = JobProcess(job_env(tmp_path, dec), args=[]).start(timeout=240)
    db = store.connect(tmp_path / "cardstream.db")
    try:
        producer = kafka_client.producer(settings, acks="all")
        for value in bad:
            producer.send(dec, value=value)
        for d in good:
            producer.send(dec, key=d["txn_id"].encode(), value=json.dumps(d).encode())
        producer.flush()
        producer.close()
        got = wait_for(lambda: (lambda c: c if all(v["processed"] >= len(good) for v in c.values()) else None)(counts(db)),
                       180, "every guarantee to count the good decisions")
        time.sleep(3)  # anything counted late would show now
        got = counts(db)
        assert job.proc.poll() is None, "\n".join(job.lines[-40:])
        windows = db.execute("SELECT max_event_time FROM usage_watermarks").fetchall()
    finally:
        job.stop()
        db.conn.close()
    fraud = sum(d["is_fraud"] for d in good)
    assert got == {g: {"processed": len(good), "fraud": fraud} for g in got}, got
    # the far-future and nanosecond event times reached no window watermark
    assert all(w[0] is None or w[0] <= now + 60_000 for w in windows), windows
    trouble = [line for line in job.lines if TROUBLE.search(line)]
    assert not trouble, trouble
