"""End to end: a real `python -m pipelines.usage` child on real Kafka and Spark, real SIGKILLs.

The scenarios share one topic, store and checkpoint root, and run in file order, so the job
starts only three times (a Spark application costs ~10-20 s to start here). Each test asserts on
what its own stage produced (deltas), on the cumulative truth, and on the sink ledger
(`sink_batches`): which batches each guarantee applied, replayed, skipped or dropped, and why.
"""
from __future__ import annotations

import dataclasses
import uuid
from collections import Counter

import pytest

from controlplane import commands, ledger
from controlplane.store import connect
from infra.config import load
from infra.topics import ensure_topics
from pipelines import audit, guarantees
from bench.harness.jobs import (JobProcess, Producer, Truth, command_status, counts, decision, job_env, log,
                                produce, settled, wait_for)

# a net for a hung job, not a speed goal: each test took 41-75 s on a machine 2.4x slower than the
# one these tests were written on (bench/RESULTS.md#test-suite)
pytestmark = pytest.mark.timeout(600)
AMO, ALO, EO = (guarantees.policy(g) for g in ("at-most-once", "at-least-once", "exactly-once"))


class Run:
    def __init__(self, topic_name, base):
        self.topic = topic_name
        self.env = job_env(base, topic_name)
        self.db = connect(base / "cardstream.db")
        s = load()
        # what the job sees: its topic, store and checkpoints (for the audit's consistent cut)
        self.settings = dataclasses.replace(s, topics=dataclasses.replace(s.topics, decisions=topic_name),
                                            store_path=base / "cardstream.db", checkpoint_root=base / "checkpoints")
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

    def ledger(self, policy, since_id: int = 0) -> list[dict]:
        return [b for b in ledger.batches(self.db, policy.query) if b["id"] > since_id]

    def last_ledger_id(self) -> int:
        return self.db.execute("SELECT COALESCE(MAX(id), 0) FROM sink_batches").fetchone()[0]

    def audit(self) -> dict:
        return audit.snapshot(self.settings, self.db)["usage"]


def applied_twice(rows: list[dict]) -> list[tuple[dict, dict]]:
    """(first, second) applications of each batch (same checkpoint, same batch id) applied twice."""
    first, out = {}, []
    for r in rows:
        if r["outcome"] != ledger.APPLIED:
            continue
        key = (r["checkpoint_id"], r["batch_id"])
        if key in first:
            out.append((first[key], r))
        else:
            first[key] = r
    return out


@pytest.fixture(scope="module")
def run(kafka, tmp_path_factory):
    name = f"decisions-{uuid.uuid4().hex[:8]}"
    ensure_topics([name], partitions=2, s=load())
    r = Run(name, tmp_path_factory.mktemp("usage-job"))
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
    assert "at-least-once batch" in commands.get(run.db, cid)["result"]
    run.job.start()
    run.send(50)
    truth, fraud_truth = run.truth.counts()
    got = settled(run.db, truth)
    assert got["exactly-once"] == {"processed": truth, "fraud": fraud_truth}
    assert got["at-most-once"]["processed"] <= truth

    # at-least-once applied the batch it wrote before the kill a second time, with the same
    # offsets (Spark's offset log), and that replay is exactly its surplus over the truth
    twice = applied_twice(run.ledger(ALO))
    assert twice, "the uncommitted at-least-once batch was not replayed"
    for a, b in twice:
        assert (a["start_offsets"], a["end_offsets"], a["processed"]) == (b["start_offsets"], b["end_offsets"],
                                                                          b["processed"])
    surplus = sum(b["processed"] for _, b in twice)
    assert got["at-least-once"]["processed"] - truth == surplus > 0
    # exactly-once never applies a batch twice: a replayed batch is recorded as skipped
    eo = run.ledger(EO)
    assert applied_twice(eo) == []
    applied_keys = {(r["checkpoint_id"], r["batch_id"]) for r in eo if r["outcome"] == ledger.APPLIED}
    assert all((r["checkpoint_id"], r["batch_id"]) in applied_keys for r in eo if r["outcome"] == ledger.SKIPPED)
    # the audit, from Kafka and the ledger at a consistent cut, says the same
    usage = run.audit()
    assert usage["at-least-once"]["replayed"] == surplus and usage["at-least-once"]["lost"] == 0
    assert usage["exactly-once"]["duplicated"] == usage["exactly-once"]["lost"] == 0


def test_sink_down_drops_at_most_once_batches_and_the_others_recover(run):
    before = counts(run.db)
    dropped_before = guarantees.dropped(run.db)
    mark = run.last_ledger_id()
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
    run.records += sent
    assert producer.duplicates > 0
    truth, fraud_truth = run.truth.counts()
    got = settled(run.db, truth)
    dropped = guarantees.dropped(run.db)["processed"] - dropped_before["processed"]
    delta = {g: got[g]["processed"] - before[g]["processed"] for g in got}
    assert got["exactly-once"] == {"processed": truth, "fraud": fraud_truth}
    assert delta["at-least-once"] == sent  # every record, late but complete (duplicates included)
    assert dropped > 0
    assert delta["at-most-once"] == sent - dropped  # exactly the dropped batches are missing
    drops = [r for r in run.ledger(AMO, mark) if r["outcome"] == ledger.DROPPED]
    assert drops and all("rejects writes" in r["reason"] for r in drops)
    assert sum(r["processed"] for r in drops) == dropped
    for durable in (ALO, EO):  # they waited the outage out: nothing dropped, nothing applied twice
        rows = run.ledger(durable, mark)
        assert not [r for r in rows if r["outcome"] == ledger.DROPPED] and applied_twice(rows) == []


def test_task_failure_restarts_from_the_checkpoint_without_the_process_dying(run):
    before = counts(run.db)
    dropped_before = guarantees.dropped(run.db)["processed"]
    mark = run.last_ledger_id()
    cid = commands.issue(run.db, "task-failure", "usage")  # the next batch of every query raises
    wait_for(lambda: command_status(run.db, cid) != "pending", 30, "the job to claim task-failure")
    sent = run.records
    run.send(100)
    sent = run.records - sent
    wait_for(lambda: command_status(run.db, cid) == "done", 60, "the injected task failures")
    truth, fraud_truth = run.truth.counts()
    # each guarantee's query restarts on its own: wait for the durable one that restarts last, too
    alo_target = before["at-least-once"]["processed"] + sent
    try:
        wait_for(lambda: counts(run.db)["at-least-once"]["processed"] >= alo_target, 90,
                 "the restarted at-least-once query to commit the failed batch")
    except TimeoutError as exc:
        log(str(exc))  # the assertion below says what it saw
    got = settled(run.db, truth)
    assert run.job.proc.poll() is None  # restarted in-process, not dead
    assert got["exactly-once"] == {"processed": truth, "fraud": fraud_truth}
    assert got["at-least-once"]["processed"] - before["at-least-once"]["processed"] == sent
    dropped = guarantees.dropped(run.db)["processed"] - dropped_before
    assert dropped > 0  # at-most-once dropped its failed batch, recorded
    assert got["at-most-once"]["processed"] - before["at-most-once"]["processed"] == sent - dropped
    drops = [r for r in run.ledger(AMO, mark) if r["outcome"] == ledger.DROPPED]
    assert drops and all("task-failure injected" in r["reason"] for r in drops)
    for durable in (ALO, EO):  # the failed batch failed its query, and the restarted query ran it once
        rows = run.ledger(durable, mark)
        assert [r for r in rows if r["outcome"] == ledger.APPLIED] and applied_twice(rows) == []
        assert not [r for r in rows if r["outcome"] == ledger.DROPPED]
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
    run.records += producer.sent_records
    truth, fraud_truth = run.truth.counts()
    got = settled(run.db, truth)
    delta_amo = got["at-most-once"]["processed"] - before["at-most-once"]["processed"]
    assert got["exactly-once"] == {"processed": truth, "fraud": fraud_truth}
    assert delta_amo < producer.sent_records  # what arrived while it was down is lost
    assert got["at-most-once"]["processed"] < truth
    assert got["at-least-once"]["processed"] >= truth
    # at-most-once restarted on a fresh checkpoint: its ledger holds batches of more than one
    checkpoints = Counter(r["checkpoint_id"] for r in run.ledger(AMO) if r["outcome"] == ledger.APPLIED)
    assert len(checkpoints) >= 2
    # the audit, reading its truth from Kafka, tells the same story
    usage = run.audit()
    assert usage["exactly-once"]["truth"] == truth and usage["exactly-once"]["lost"] == 0
    assert usage["exactly-once"]["duplicated"] == 0
    assert usage["at-most-once"]["lost"] > 0 and usage["at-most-once"]["replayed"] == 0
    # ... at a cut that is the whole topic: exactly-once has committed every record sent
    assert sum(usage["exactly-once"]["committed_offsets"].values()) == run.records
