"""The fraud job end to end: real Kafka, `python -m pipelines.fraud` as a real subprocess, real SQLite.

Each test isolates itself: fresh topics, its own checkpoint folder and store file. Most runs use
`--available-now` (process what the topic holds, then stop), which keeps them deterministic.
The `decisions` topic is read read_committed, as the usage job and the audit read it: each
transaction's decision must be there exactly once, whatever was killed or stopped.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from controlplane import commands, fencing, store
from infra import broker, kafka_client

ROOT = Path(__file__).resolve().parents[2]
HOUR, MINUTE = 3_600_000, 60_000
PARIS, NEW_YORK = (48.8566, 2.3522), (40.7128, -74.0060)


def txn(txn_id, card, t, amount=2_500, where=PARIS):
    return {"txn_id": txn_id, "card_id": card, "merchant_id": "m-1", "amount_cents": amount,
            "currency": "EUR", "lat": where[0], "lon": where[1], "event_time": t,
            "produced_at": int(time.time() * 1000)}


def produce(bootstrap, topic, records):
    producer = kafka_client.producer(None, acks="all", max_request_size=2 * 1024 * 1024)
    for r in records:
        if isinstance(r, bytes):
            producer.send(topic, value=r)
        else:
            producer.send(topic, key=r["card_id"].encode(), value=json.dumps(r).encode())
    producer.flush()
    producer.close()


def consume(bootstrap, topic):
    return [json.loads(m.value) for m in kafka_client.read_to_end(topic)]


class Job:
    """Runs `python -m pipelines.fraud` on this test's topics, checkpoint and store."""

    def __init__(self, tmp_path: Path, topic):
        self.tx, self.dec, self.dlq, self.markers = topic("tx"), topic("dec"), topic("dlq"), topic("marks")
        self.store_path = tmp_path / "cardstream.db"
        self.args = ["--transactions-topic", self.tx, "--decisions-topic", self.dec, "--dlq-topic", self.dlq,
                     "--markers-topic", self.markers, "--realtime-topic", topic("rt"),
                     "--checkpoint", str(tmp_path / "checkpoint"), "--store", str(self.store_path),
                     "--trigger-seconds", "0.2"]
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_MASTER": "local[2]",
                    "SPARK_SHUFFLE_PARTITIONS": "2", "CARDSTREAM_DB": str(self.store_path)}

    def start(self, *extra) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "pipelines.fraud", *self.args, *extra], cwd=ROOT,
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def run_available_now(self, *extra, timeout=240) -> str:
        proc = self.start("--available-now", *extra)
        out, _ = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, out[-3000:]
        return out

    def rows(self, sql="SELECT * FROM decisions"):
        db = store.connect(self.store_path)
        try:
            return [dict(r) for r in db.query(sql)]
        finally:
            db.conn.close()

    def count(self) -> int:
        if not self.store_path.exists():
            return 0
        return self.rows("SELECT count(*) AS n FROM decisions")[0]["n"]


def history(t0):
    """Three ordinary transactions, 10 minutes apart, for each of five cards."""
    return [txn(f"h-{card}-{i}", card, t0 + i * 10 * MINUTE, amount=2_000 + 100 * i)
            for card in ("spike", "travel", "testing", "calm", "calm2") for i in range(4)]


def test_patterns_dead_letters_late_and_profiles_across_a_restart(kafka, topic, tmp_path):
    job = Job(tmp_path, topic)
    t0 = int(time.time() * 1000) - 3 * HOUR
    first = history(t0)
    huge = json.dumps({**txn("b5", "calm", t0), "merchant_id": "m" * 900_000}).encode()
    bad = [b"{not json", json.dumps({"txn_id": "b2", "amount_cents": 5}).encode(),
           json.dumps({**txn("b3", "calm", t0), "amount_cents": "lots"}).encode(),
           json.dumps({**txn("b4", "calm", t0), "amount_cents": -3}).encode(), huge]
    produce(kafka, job.tx, first + bad)
    job.run_available_now()

    rows = job.rows()
    assert sorted(r["txn_id"] for r in rows) == sorted(t["txn_id"] for t in first)
    assert not any(r["is_fraud"] for r in rows)
    assert all(r["decided_at"] >= r["produced_at"] for r in rows)
    dead = consume(kafka, job.dlq)
    reasons = {d["reason"] for d in dead}
    assert len(dead) == 5 and "malformed JSON" in reasons and "missing field card_id" in reasons
    assert "wrong type for amount_cents" in reasons and "amount_cents out of range" in reasons
    assert {d["raw"] for d in dead} >= {"{not json"}
    # a message near the broker's size limit is dead-lettered with its payload cut, not dropped
    oversized = next(d for d in dead if d["reason"] == "oversized payload")
    assert oversized["raw_truncated"] and oversized["raw_bytes"] == len(huge) and len(oversized["raw"]) < len(huge)
    assert sum(r["count"] for r in job.rows("SELECT * FROM dead_letters")) == 5

    # The other processor's state on this checkpoint would fail Spark's state schema check at every
    # restart: refused in one sentence, before any Spark starts, and the checkpoint is left as it was
    refused = subprocess.run([sys.executable, "-m", "pipelines.fraud", *job.args, "--available-now"], cwd=ROOT,
                             env={**job.env, "FRAUD_PROCESSOR": "python"}, capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "FRAUD_PROCESSOR=jvm" in refused.stdout + refused.stderr

    # Second run on the same checkpoint: the profiles built above must still be there.
    t1 = t0 + 40 * MINUTE
    second = [
        txn("p-spike", "spike", t1, amount=60_000),                          # 25x the card's average
        txn("p-travel", "travel", t1, where=NEW_YORK),                       # Paris -> NY in 10 minutes
        *[txn(f"p-testing-{i}", "testing", t1 + i * 2_000, amount=100) for i in range(8)],
        txn("p-calm", "calm", t1, amount=2_600),
        txn("p-late", "calm2", t0 - HOUR, amount=2_200),                     # far behind the watermark
    ]
    produce(kafka, job.tx, second)
    job.run_available_now()

    by_id = {r["txn_id"]: r for r in job.rows()}
    assert len(by_id) == len(first) + len(second)
    assert by_id["p-spike"]["is_fraud"] and by_id["p-spike"]["score_avg_ticket"] >= 0.9
    assert by_id["p-travel"]["is_fraud"] and by_id["p-travel"]["score_proximity"] >= 0.9
    assert by_id["p-testing-7"]["is_fraud"] and by_id["p-testing-7"]["score_velocity"] >= 0.9
    assert not by_id["p-testing-0"]["is_fraud"]
    assert not by_id["p-calm"]["is_fraud"] and by_id["p-calm"]["score"] < 0.3
    assert by_id["p-late"]["is_late"] and not by_id["p-calm"]["is_late"]
    decisions = consume(kafka, job.dec)
    assert sorted(d["txn_id"] for d in decisions) == sorted(by_id)  # exactly once on Kafka
    assert set(decisions[0]) == set(store.TABLES["decisions"][0]) - {"batch_id"}
    progress = job.rows("SELECT query, num_input_rows FROM batch_progress WHERE query = 'fraud'")
    # the query reads every Kafka record (the malformed ones are split off after the read)
    assert sum(p["num_input_rows"] for p in progress) == len(first) + len(bad) + len(second)


def _wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_sigkill_mid_run_loses_nothing_duplicates_nothing_and_a_zombie_is_fenced(kafka, topic, tmp_path):
    job = Job(tmp_path, topic)
    t0 = int(time.time() * 1000) - HOUR
    total = 3_000
    produce(kafka, job.tx, [txn(f"k-{i}", f"card-{i % 300}", t0 + i * 1_000) for i in range(total)])

    proc = job.start("--max-offsets-per-trigger", "150")
    try:
        _wait_for(lambda: job.count() > 0, 180, "the first decisions")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert 0 < job.count() < total, "the kill should land mid-run"

    # A restarted instance resumes; then a newer one takes the lease: the old one must stop, by
    # whichever comes first: its next batch's write fenced (exit 3, the write rejected and counted)
    # or its heartbeat finding the lease lost (exit 4); either way it writes nothing more.
    proc = job.start("--max-offsets-per-trigger", "150")
    try:
        before = job.count()
        _wait_for(lambda: job.count() > before, 180, "the restarted job's decisions")
        db = store.connect(job.store_path)
        fencing.take_lease(db, "fraud")
        db.conn.close()
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (3, 4), out[-2000:]
    if proc.returncode == 3:
        assert "fenced" in out
        assert job.rows("SELECT count(*) AS n FROM rejected_writes WHERE job = 'fraud'")[0]["n"] >= 1
    else:
        assert "no longer holds the lease" in out, out[-2000:]

    job.run_available_now()
    ids = [r["txn_id"] for r in job.rows("SELECT txn_id FROM decisions")]
    assert len(ids) == total and set(ids) == {f"k-{i}" for i in range(total)}
    on_kafka = [d["txn_id"] for d in consume(kafka, job.dec)]
    assert sorted(on_kafka) == sorted(ids)  # exactly once on Kafka: no loss, no duplicate


def test_crash_after_sink_and_a_broker_outage_longer_than_the_delivery_timeout(kafka, settings, topic, tmp_path):
    """The replayed batch after crash-after-sink is skipped on Kafka; sends failing for longer than
    the delivery timeout fail the batch (it is replayed), they are never dropped."""
    job = Job(tmp_path, topic)
    job.env["KAFKA_DELIVERY_TIMEOUT_MS"] = "4000"
    t0 = int(time.time() * 1000) - HOUR
    first = [txn(f"c-{i}", f"card-{i % 50}", t0 + i * 1_000) for i in range(400)]
    produce(kafka, job.tx, first)
    db = store.connect(job.store_path)
    command = commands.issue(db, "crash-after-sink", "fraud")
    proc = job.start("--max-offsets-per-trigger", "100")
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == -signal.SIGKILL, out[-2000:]
    row = commands.get(db, command)
    assert row["status"] == commands.DONE and "before Spark's commit" in row["result"]
    crashed = job.rows("SELECT batch_id, count(*) AS n FROM sink_batches WHERE sink = 'fraud' GROUP BY batch_id")
    assert crashed, "the batch was written to the sinks before the kill"

    # a backlog of 15 batches: the outage below comes after the first 3, with 12 still to go
    later = [txn(f"d-{i}", f"card-{i % 50}", t0 + 500_000 + i * 1_000) for i in range(1_500)]
    produce(kafka, job.tx, later)
    proc = job.start("--max-offsets-per-trigger", "100")
    try:
        _wait_for(lambda: job.count() > len(first) + 300, 240, "the backlog being worked through")
        skipped = job.rows("SELECT batch_id FROM sink_batches WHERE sink = 'fraud' AND outcome = 'skipped'")
        assert skipped, "the replay of the crashed batch is recognised and skipped"
        broker.down(settings, quiet=True)  # mid-backlog: a batch is reading or sending
        at_outage = job.count()
        time.sleep(10)  # longer than the 4 s delivery timeout
        broker.up(settings, quiet=True)
        _wait_for(lambda: job.count() == len(first) + len(later), 300, "every transaction decided")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    assert at_outage < len(first) + len(later), "the outage came while the backlog was being worked through"
    # Where the outage lands is timing: a batch whose sends outlive the delivery timeout fails and is
    # replayed (a failed send always raises: tests/kafka/test_transactional_topic.py); one still
    # reading its offsets waits for the broker. Either way nothing is dropped or doubled (below).
    if " failed (" in out:
        assert "restarting it from its checkpoint" in out, out[-2000:]
    on_kafka = [d["txn_id"] for d in consume(kafka, job.dec)]
    assert sorted(on_kafka) == sorted(t["txn_id"] for t in first + later), out[-2000:]


def test_a_repeated_txn_id_keeps_its_first_decision_in_the_store_and_is_counted(kafka, topic, tmp_path):
    """A producer that sends a txn_id twice: the decisions topic gets both decisions, the store
    keeps the first, and the one it did not keep is counted (`not_kept`), not dropped unseen;
    twice in one batch and again in a later run."""
    job = Job(tmp_path, topic)
    t0 = int(time.time() * 1000) - HOUR
    first = history(t0)
    produce(kafka, job.tx, first + [first[0]])           # the same transaction again, same batch
    job.run_available_now(timeout=600)
    produce(kafka, job.tx, [{**first[1], "amount_cents": 9_999}])   # decided before, sent again
    job.run_available_now(timeout=600)

    on_kafka = [d["txn_id"] for d in consume(kafka, job.dec)]
    assert sorted(on_kafka) == sorted([t["txn_id"] for t in first] + [first[0]["txn_id"], first[1]["txn_id"]])
    assert job.count() == len(first)
    assert job.rows(f"SELECT amount_cents FROM decisions WHERE txn_id = '{first[1]['txn_id']}'")[0]["amount_cents"] \
        == first[1]["amount_cents"]                        # the first decision is the one kept
    kept = job.rows("SELECT * FROM not_kept ORDER BY batch_id")
    assert [r["kind"] for r in kept] == ["repeated", "repeated"] and sum(r["count"] for r in kept) == 2, kept
    assert [json.loads(r["detail"]) for r in kept] == [[first[0]["txn_id"]], [first[1]["txn_id"]]]
    assert len(on_kafka) - job.count() == sum(r["count"] for r in kept)   # every decision accounted for


def test_a_restart_after_the_ledger_is_pruned_still_writes_each_batch_once(kafka, topic, tmp_path):
    """Issue 36 item 13: the housekeeping prunes the sink ledger down to what Spark's logs still
    hold (MIN_BATCHES_TO_RETAIN 2 here); a crash after the sink and a restart after that still skip
    the replayed batch and write every decision once, in the store and on Kafka."""
    from controlplane.clock import now_ms
    from infra.config import load
    from pipelines.supervisor import housekeeping

    job = Job(tmp_path, topic)
    job.env["MIN_BATCHES_TO_RETAIN"] = "2"
    t0 = int(time.time() * 1000) - HOUR
    first = [txn(f"r-{i}", f"card-{i % 40}", t0 + i * 1_000) for i in range(240)]
    produce(kafka, job.tx, first)
    job.run_available_now("--max-offsets-per-trigger", "30")
    db = store.connect(job.store_path)
    ids = lambda: [r["batch_id"] for r in job.rows(  # noqa: E731
        "SELECT batch_id FROM sink_batches WHERE sink = 'fraud' AND outcome = 'applied' ORDER BY batch_id")]
    before = ids()
    assert len(before) >= 8, before
    s = load({**job.env, "MIN_BATCHES_TO_RETAIN": "2", "AUDIT_HORIZON_MINUTES": "1"})
    # a pass two minutes later, when these rows are past the audit's horizon
    assert housekeeping.prune_ledger(db, s, now_ms() + 2 * MINUTE) > 0
    assert ids() == [b for b in before if b >= before[-1] - 2]

    later = [txn(f"s-{i}", f"card-{i % 40}", t0 + 300_000 + i * 1_000) for i in range(240)]
    produce(kafka, job.tx, later)
    command = commands.issue(db, "crash-after-sink", "fraud")
    proc = job.start("--max-offsets-per-trigger", "30")
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == -signal.SIGKILL, out[-2000:]
    assert "before Spark's commit" in commands.get(db, command)["result"]
    housekeeping.prune_ledger(db, s, now_ms() + 2 * MINUTE)
    job.run_available_now("--max-offsets-per-trigger", "30")

    skipped = job.rows("SELECT batch_id FROM sink_batches WHERE sink = 'fraud' AND outcome = 'skipped'")
    assert len(skipped) == 1, skipped   # the crashed batch's replay, recognised after the pruning
    want = sorted(t["txn_id"] for t in first + later)
    assert sorted(r["txn_id"] for r in job.rows()) == want
    assert sorted(d["txn_id"] for d in consume(kafka, job.dec)) == want  # exactly once on Kafka
    applied = ids()
    assert applied == sorted(set(applied)) and applied[0] >= before[-1] - 2  # each once; the pruned stay gone
    db.conn.close()
