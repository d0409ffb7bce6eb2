"""The poison-batch rule (issue 15) on the real broker with a real fraud job process.

The `poison-pill` fault makes the running job send itself a valid transaction its code then fails
on, in every batch that holds it. Good transactions sent right after it share its batch. The
decisions query fails POISON_BATCH_FAILURES (3) times the same way on the same offsets; then the
poison record, and only it, lands in the dead-letter topic with `poison batch: <class>: <message>`
as reason; the query restarts without it inside the job (the process never exits); every good
transaction is decided exactly once in the store and in the `decisions` topic.
"""
from __future__ import annotations

import dataclasses
import json
import re
import time
from collections import Counter

from controlplane import commands, store
from infra import kafka_client
from infra.config import Topics
from pipelines import audit
from bench.harness.jobs import JobProcess, job_env, wait_for

FRAUD_READY = re.compile(r"\bfraud INFO \w+ mode, epoch")


def now_ms() -> int:
    return int(time.time() * 1000)


def txn(i: int) -> dict:
    t = now_ms()
    return {"txn_id": f"good-{i}", "card_id": f"card-{i % 7}", "merchant_id": "m-1", "amount_cents": 2_500,
            "currency": "EUR", "lat": 48.8566, "lon": 2.3522, "event_time": t - 1_000, "produced_at": t}


def query(path, sql, args=()):
    db = store.connect(path)
    try:
        return [dict(r) for r in db.query(sql, args)]
    finally:
        db.conn.close()


def test_a_poison_record_is_dead_lettered_after_three_identical_failures_and_the_job_moves_on(
        kafka, topic, tmp_path, settings):
    tx, dec, dlq, marks, rt = topic("tx"), topic("dec"), topic("dlq"), topic("marks"), topic("rt")
    db_path = tmp_path / "cardstream.db"
    args = ["--transactions-topic", tx, "--decisions-topic", dec, "--dlq-topic", dlq,
            "--markers-topic", marks, "--realtime-topic", rt,
            "--checkpoint", str(tmp_path / "checkpoints" / "fraud"), "--store", str(db_path), "--trigger-seconds", "0.5"]
    job = JobProcess(job_env(tmp_path, dec, {"CARDSTREAM_DB": str(db_path), "POISON_BATCH_FAILURES": "3"}),
                     args, module="pipelines.fraud", ready=FRAUD_READY)
    producer = kafka_client.producer(settings, acks="all")
    decided = lambda: {r["txn_id"] for r in query(db_path, "SELECT txn_id FROM decisions")}  # noqa: E731

    def send(records):
        for r in records:
            producer.send(tx, key=r["card_id"].encode(), value=json.dumps(r).encode())
        producer.flush()

    job.start(timeout=240)
    try:
        send([txn(i) for i in range(5)])
        wait_for(lambda: len(decided()) >= 5, 180, "the first decisions")
        db = store.connect(db_path)
        command = commands.issue(db, "poison-pill", "fraud")
        db.conn.close()
        poison = f"poison-pill-{command}"
        # the poison is in the topic (sent by the job) before the good ones that share its batch
        wait_for(lambda: any(m.value and poison.encode() in m.value for m in kafka_client.read_to_end(tx)), 60,
                 "the poison transaction")
        send([txn(i) for i in range(5, 25)])
        done = wait_for(lambda: (lambda rows: rows[0] if rows and rows[0]["status"] != "started" and
                                 rows[0]["status"] != "pending" else None)(
            query(db_path, "SELECT status, result FROM commands WHERE id = ?", [command])), 150,
            "the poison-pill command to finish")
        wait_for(lambda: {f"good-{i}" for i in range(25)} <= decided(), 120, "every good transaction decided")
        wait_for(lambda: kafka_client.read_to_end(dlq) or None, 60, "the dead letter")
        time.sleep(2)  # room for a second dead letter or decision that must not come
        letters = [json.loads(m.value) for m in kafka_client.read_to_end(dlq)]
        assert job.proc.poll() is None, "the job exited:\n" + "\n".join(job.lines[-40:])
        in_topic = Counter(json.loads(m.value)["txn_id"] for m in kafka_client.read_to_end(dec))
        failures = query(db_path, "SELECT query, batch_id, error, in_a_row, action FROM query_failures ORDER BY id")
        quarantines = query(db_path, "SELECT * FROM quarantines")
        dead = query(db_path, "SELECT reason, count FROM dead_letters")
    finally:
        producer.close()
        job.stop()
    assert job.proc.returncode == 0, "\n".join(job.lines[-40:])
    assert done["status"] == "done", done
    assert not any("giving up" in line for line in job.lines)

    # three identical failures of one batch of the decisions query, the third quarantined it
    assert [f["in_a_row"] for f in failures] == [1, 2, 3], failures
    assert [f["action"] for f in failures] == ["restart", "restart", "quarantine"], failures
    assert len({(f["query"], f["batch_id"], f["error"]) for f in failures}) == 1, failures
    assert failures[0]["query"] == "fraud" and failures[0]["error"].startswith("PoisonPillError: "), failures

    # the poison record alone is dead-lettered, with the exception's class and message as reason
    assert len(letters) == 1, letters
    [letter] = letters
    assert letter["reason"] == (f"poison batch: PoisonPillError: transaction {poison} meets a bug in the fraud "
                                f"job's code (poison-pill command {command})")
    assert json.loads(letter["raw"])["txn_id"] == poison and letter["topic"] == tx
    [q] = quarantines
    assert q["status"] == "dead-lettered" and q["dead_lettered"] == 1 and q["failures"] == 3
    assert [r["txn_id"] for r in json.loads(q["records"])] == [poison]
    assert dead == [{"reason": letter["reason"], "count": 1}]

    # every good transaction decided exactly once, in the store and the decisions topic; not the poison
    good = {f"good-{i}" for i in range(25)}
    assert decided() == good
    assert set(in_topic) == good and set(in_topic.values()) == {1}, in_topic

    # the consistent-cut audit counts the poison as dead-lettered, not as lost
    names = Topics(transactions=tx, labels=topic("labels"), decisions=dec, dead_letters=dlq, markers=marks,
                   decisions_rt=rt, partitions=settings.topics.partitions)
    db = store.connect(db_path)
    try:
        fraud = audit.Auditor(dataclasses.replace(settings, topics=names, store_path=db_path,
                                                  checkpoint_root=tmp_path / "checkpoints"), db).snapshot()["fraud"]
    finally:
        db.conn.close()
    assert (fraud["truth"], fraud["observed"], fraud["lost"], fraud["topic_lost"], fraud["duplicated"]) == \
        (25, 25, 0, 0, 0), fraud
