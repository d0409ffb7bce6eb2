"""End to end: a real `python -m pipelines.usage` child on real Kafka and Spark, real SIGKILLs.

The three scenarios share one topic, store and checkpoint root, and run in file order, so the
job starts only three times (a Spark application costs ~10-20 s to start here). Each test asserts
on what its own stage produced (deltas) and on the cumulative truth.
"""
from __future__ import annotations

import pytest

from tests.harness.jobs import (JobProcess, Producer, Truth, command_status, counts, decision, job_env,
                              produce, settled, wait_for)
from controlplane import commands
from pipelines import guarantees
from controlplane.store import connect

pytestmark = pytest.mark.timeout(240)


class Run:
    def __init__(self, kafka, topic_name, base):
        self.kafka, self.topic = kafka, topic_name
        self.env = job_env(base, topic_name)
        self.db = connect(base / "cardstream.db")
        self.job = JobProcess(self.env)
        self.truth = Truth()
        self.records = 0  # every record sent, duplicates included
        self.next_id = 0

    def send(self, n: int):
        batch = [decision(self.next_id + i, (self.next_id + i) % 5 == 0) for i in range(n)]
        self.next_id += n
        produce(None, self.topic, batch)
        self.truth.add(batch)
        self.records += len(batch)

    def producer(self) -> Producer:
        p = Producer(None, self.topic, self.truth, rate=100, start=self.next_id, duplicate_rate=0.1)
        self.next_id += 1_000_000  # fresh txn_ids for whatever comes after this producer
        return p


@pytest.fixture(scope="module")
def run(kafka, tmp_path_factory):
    import uuid

    from infra.config import load
    from infra.topics import ensure_topics

    name = f"decisions-{uuid.uuid4().hex[:8]}"
    ensure_topics([name], partitions=2, s=load())
    r = Run(kafka, name, tmp_path_factory.mktemp("usage-job"))
    yield r
    r.job.stop()
    r.db.conn.close()


def test_crash_after_sink_replays_into_at_least_once_only(run):
    run.job.start()
    run.send(200)
    wait_for(lambda: all(c["processed"] >= 200 for c in counts(run.db).values()), 90, "the first 200 events")
    cid = commands.issue(run.db, "crash-after-sink", "usage")
    wait_for(lambda: command_status(run.db, cid) != "pending", 30, "the job to claim crash-after-sink")
    run.send(200)
    assert run.job.wait_exit(90) == -9  # it SIGKILLed itself
    assert command_status(run.db, cid) == "done"  # marked done before the kill: not run again
    run.job.start()
    run.send(50)
    truth, fraud_truth = run.truth.counts()
    got = settled(run.db, truth)
    assert got["exactly-once"] == {"processed": truth, "fraud": fraud_truth}
    assert got["at-least-once"]["processed"] > truth  # the uncommitted batch was applied twice
    assert got["at-most-once"]["processed"] <= truth
    assert command_status(run.db, cid) == "done"


def test_sink_down_drops_at_most_once_batches_and_the_others_recover(run):
    before = counts(run.db)
    dropped_before = guarantees.dropped(run.db)
    producer = run.producer()
    producer.start()
    try:
        wait_for(lambda: counts(run.db)["exactly-once"]["processed"] > before["exactly-once"]["processed"],
                 60, "the producer's first events")
        cid = commands.issue(run.db, "sink-down", "usage", seconds=3)
        wait_for(lambda: command_status(run.db, cid) == "done", 30, "the job to take the sink down")
        wait_for(lambda: guarantees.dropped(run.db)["batches"] > dropped_before["batches"], 30,
                 "at-most-once to drop a batch")
    finally:
        producer.stop()
    sent = producer.sent_records
    truth, fraud_truth = run.truth.counts()
    got = settled(run.db, truth)
    dropped = guarantees.dropped(run.db)["processed"] - dropped_before["processed"]
    delta = {g: got[g]["processed"] - before[g]["processed"] for g in got}
    assert got["exactly-once"] == {"processed": truth, "fraud": fraud_truth}
    assert delta["at-least-once"] == sent  # every record, late but complete (duplicates included)
    assert dropped > 0
    assert delta["at-most-once"] == sent - dropped  # exactly the dropped batches are missing


def test_task_failure_restarts_from_the_checkpoint_without_the_process_dying(run):
    before = counts(run.db)
    dropped_before = guarantees.dropped(run.db)["processed"]
    cid = commands.issue(run.db, "task-failure", "usage")  # the next batch of every query raises
    wait_for(lambda: command_status(run.db, cid) != "pending", 30, "the job to claim task-failure")
    sent = run.records
    run.send(100)
    sent = run.records - sent
    wait_for(lambda: command_status(run.db, cid) == "done", 60, "the injected task failures")
    truth, fraud_truth = run.truth.counts()
    got = settled(run.db, truth)
    assert run.job.proc.poll() is None  # restarted in-process, not dead
    assert got["exactly-once"] == {"processed": truth, "fraud": fraud_truth}
    assert got["at-least-once"]["processed"] - before["at-least-once"]["processed"] == sent
    dropped = guarantees.dropped(run.db)["processed"] - dropped_before
    assert dropped > 0  # at-most-once dropped its failed batch, recorded
    assert got["at-most-once"]["processed"] - before["at-most-once"]["processed"] == sent - dropped
    assert any("task-failure injected" in line for line in run.job.lines)


def test_crash_while_producing_loses_at_most_once_only(run):
    before = counts(run.db)
    producer = run.producer()
    producer.start()
    try:
        wait_for(lambda: counts(run.db)["exactly-once"]["processed"] > before["exactly-once"]["processed"],
                 60, "the producer's first events")
        run.job.kill()
        run.job.start()  # the producer kept producing while the job was down and starting
        wait_for(lambda: counts(run.db)["at-most-once"]["processed"] > before["at-most-once"]["processed"],
                 60, "at-most-once to see new events after the restart")
    finally:
        producer.stop()
    truth, fraud_truth = run.truth.counts()
    got = settled(run.db, truth)
    delta_amo = got["at-most-once"]["processed"] - before["at-most-once"]["processed"]
    assert got["exactly-once"] == {"processed": truth, "fraud": fraud_truth}
    assert delta_amo < producer.sent_records  # what arrived while it was down is lost
    assert got["at-most-once"]["processed"] < truth
    assert got["at-least-once"]["processed"] >= truth
    # the audit, reading its truth from Kafka, tells the same story
    import dataclasses

    from infra.config import load
    from pipelines import audit

    s = load()
    s = dataclasses.replace(s, topics=dataclasses.replace(s.topics, decisions=run.topic))
    usage = audit.snapshot(s, run.db)["usage"]
    assert usage["exactly-once"]["truth"] == truth and usage["exactly-once"]["lost"] == 0
    assert usage["exactly-once"]["duplicated"] == 0
    assert usage["at-most-once"]["lost"] > 0 and usage["at-most-once"]["duplicated"] == 0
