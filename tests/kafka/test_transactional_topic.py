"""The exactly-once Kafka writer of the fraud job, against the real broker: one transaction per
batch with its marker, replays skipped, a newer instance fencing an older one at the broker, the
last marker found behind any number of other records, and a transaction the broker ended on its
timeout told from a fence by the store's epoch."""
from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from controlplane import fencing
from controlplane.store import connect
from infra import kafka_client
from pipelines.fraud.sinks import Fenced, TransactionalTopic


def read_committed(topic: str) -> list[dict]:
    return [json.loads(r.value) for r in kafka_client.read_to_end(topic)]


def records(batch: int, n: int = 3) -> list[tuple[bytes, bytes]]:
    return [(f"t-{batch}-{i}".encode(), json.dumps({"txn_id": f"t-{batch}-{i}"}).encode()) for i in range(n)]


def test_each_batch_once_replays_skipped_and_a_zombie_fenced_at_the_broker(kafka, settings, topic):
    out, markers = topic("dec"), topic("marks")
    first = TransactionalTopic(settings, "fraud", out, markers, "checkpoint-a")
    assert first.write(0, records(0)) and first.write(1, records(1))
    assert not first.write(1, records(1)), "a batch already committed is skipped"

    # a new instance on the same checkpoint: init_transactions fences the first at the broker,
    # and it learns from the markers where the first one stopped
    second = TransactionalTopic(settings, "fraud", out, markers, "checkpoint-a")
    assert not second.write(1, records(1)), "the replay after a takeover is skipped too"
    assert second.last_committed == 1
    with pytest.raises(Fenced):
        first.write(2, records(2, 5))
    assert second.write(2, records(2))

    # another checkpoint (batch ids restart at 0) is not confused with this one
    other = TransactionalTopic(settings, "fraud-other", out, markers, "checkpoint-b")
    assert other.write(0, records(9, 1))

    ids = [d["txn_id"] for d in read_committed(out)]
    assert sorted(ids) == sorted([f"t-{b}-{i}" for b in (0, 1, 2) for i in range(3)] + ["t-9-0"])
    assert [m["batch_id"] for m in read_committed(markers) if m["checkpoint_id"] == "checkpoint-a"] == [0, 1, 2]
    for t in (first, second, other):
        t.close()


def test_a_failed_send_aborts_the_transaction_and_raises(kafka, settings, topic):
    """A record the broker refuses fails the whole batch: nothing of it becomes readable."""
    out, markers = topic("dec"), topic("marks")
    writer = TransactionalTopic(settings, "fraud", out, markers, "checkpoint-a")
    too_big = (b"k", b"x" * (2 * 1024 * 1024))  # over the broker's default message size limit
    with pytest.raises(Exception):
        writer.write(0, records(0) + [too_big])
    assert read_committed(out) == []
    assert writer.write(0, records(0)), "the replay of the failed batch goes through"
    assert len(read_committed(out)) == 3
    writer.close()


def test_a_takeover_opens_its_transactions_before_its_first_batch(kafka, settings, topic, tmp_path):
    """`Sinks.prepare`: on a checkpoint that exists, the new instance's init_transactions (which
    fences the old one at the broker) and its read of the markers run on their own thread before
    any batch is written; a checkpoint not started yet has nothing to open."""
    from pipelines.fraud.job import Options
    from pipelines.fraud.sinks import Sinks

    out, dlq, markers = topic("dec"), topic("dlq"), topic("marks")
    checkpoint = tmp_path / "checkpoints"
    (checkpoint / "decisions").mkdir(parents=True)
    (checkpoint / "decisions" / "metadata").write_text(json.dumps({"id": "checkpoint-a"}))
    old = TransactionalTopic(settings, "fraud", out, markers, "checkpoint-a")
    assert old.write(0, records(0))

    o = Options("microbatch", "earliest", False, 0.0, None, "transactions", out, dlq, checkpoint,
                tmp_path / "store.db", 0.7, markers_topic=markers)
    sinks = Sinks(o, settings, epoch=2)
    opening = sinks.prepare()
    opening.join(60)
    assert not opening.is_alive()
    opened = sinks._topics["fraud"]
    assert opened.producer is not None and opened.last_committed == 0
    assert "fraud-dlq" not in sinks._topics  # its query has not started on this checkpoint
    with pytest.raises(Fenced):  # fenced before the new instance wrote anything
        old.write(1, records(1))
    assert not opened.write(0, records(0)), "the replayed batch is still skipped"
    assert opened.write(1, records(1))
    assert Sinks(replace(o, checkpoint=tmp_path / "fresh"), settings, epoch=1).prepare() is None
    sinks.close()
    old.close()


def cleanup_policy(settings, topic: str) -> str:
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = kafka_client.admin(settings)
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {"cleanup.policy": None})],
                                           config_filter="all")
        return described["topic"][topic]["cleanup.policy"]["value"]
    finally:
        admin.close()


def test_the_last_marker_is_found_behind_any_number_of_other_markers(kafka, settings, topic):
    """The markers topic is shared by the job's streams (decisions, dead letters, poison letters)
    and holds each transaction's control record too: 300 batches of another stream put 600
    records after this stream's last marker. A new instance must still find it, or it writes the
    replayed batch a second time."""
    # one partition: the other stream's markers land after ours whatever their keys hash to
    out, other_out, markers = topic("dec"), topic("dlq"), topic("marks", partitions=1)
    first = TransactionalTopic(settings, "fraud", out, markers, "checkpoint-a")
    assert first.write(0, records(0)) and first.write(1, records(1))
    first.close()
    busy = TransactionalTopic(settings, "fraud-dlq", other_out, markers, "checkpoint-b")
    for i in range(300):
        assert busy.write(i, records(1000 + i, 1))
    busy.close()
    ends = kafka_client.end_offsets(markers, settings)
    assert sum(ends.values()) > 600, ends

    takeover = TransactionalTopic(settings, "fraud", out, markers, "checkpoint-a")
    assert not takeover.write(1, records(1)), "the replayed batch 1 is skipped, its marker found"
    assert takeover.last_committed == 1
    assert takeover.write(2, records(2))
    takeover.close()
    ids = [d["txn_id"] for d in read_committed(out)]
    assert sorted(ids) == sorted(f"t-{b}-{i}" for b in (0, 1, 2) for i in range(3)), "each batch once"
    # the topic is compacted, so reading it whole stays short: the newest marker of each key is kept
    assert cleanup_policy(settings, markers) == "compact"


def log_ends(settings, topic: str) -> tuple[dict, dict]:
    """({partition: end}, {partition: last stable offset}): what is in the log, and how far a
    read_committed reader may read (an open transaction holds the second back)."""
    from kafka import TopicPartition

    ends = {}
    for level in ("read_uncommitted", "read_committed"):
        c = kafka_client.consumer(settings, isolation_level=level, group_id=None)
        try:
            parts = [TopicPartition(topic, p) for p in kafka_client.partitions(c, topic)]
            ends[level] = {tp.partition: o for tp, o in c.end_offsets(parts).items()}
        finally:
            c.close()
    return ends["read_uncommitted"], ends["read_committed"]


class StallingBatch:
    """A batch whose production stalls after its first record reached the broker (a GC pause, a
    starved CPU, a long broker outage) until the broker ended the open transaction on its timeout;
    iterated again, by a retry, it does not stall."""

    def __init__(self, settings, topic: str, records: list):
        self.settings, self.topic, self.records = settings, topic, records
        self.stalls = 0

    def __len__(self):
        return len(self.records)

    def __iter__(self):
        if self.stalls:
            yield from self.records
            return
        self.stalls += 1
        before = sum(log_ends(self.settings, self.topic)[0].values())
        yield self.records[0]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the record in the log, then the transaction ended
            ends, stable = log_ends(self.settings, self.topic)
            if sum(ends.values()) > before + 1 and ends == stable:
                break  # the record and the abort marker are in, and nothing holds the LSO back
            time.sleep(0.5)
        else:
            raise AssertionError("the broker did not end the transaction on its timeout")
        yield from self.records[1:]


def test_a_transaction_the_broker_ended_on_its_timeout_is_not_a_fence(kafka, settings, topic, tmp_path):
    """The broker aborts a transaction older than the producer's transaction.timeout.ms and bumps
    its epoch; the producer's next request is answered ProducerFenced. While the store says this
    instance still owns the job, that is not a fence (before: `rejected_writes`, exit 3, a false
    zombie): the batch is sent again by a new producer and lands once. When a newer epoch owns the
    job, the same answer is a fence."""
    out, markers = topic("dec"), topic("marks")
    db = connect(tmp_path / "store.db")
    epoch = fencing.take_lease(db, "fraud")
    writer = TransactionalTopic(settings, "fraud", out, markers, "checkpoint-a",
                                owner=lambda: fencing.current_epoch(db, "fraud") <= epoch, transaction_timeout_ms=2000)
    assert writer.write(0, records(0))
    stalling = StallingBatch(settings, out, records(1, 4))
    assert writer.write(1, stalling), "sent again after the broker ended its transaction"
    assert stalling.stalls == 1 and writer.expired == 1
    assert not writer.write(1, records(1, 4)), "a replay of the batch is skipped: its marker is committed"
    ids = [d["txn_id"] for d in read_committed(out)]
    assert sorted(ids) == sorted([f"t-0-{i}" for i in range(3)] + [f"t-1-{i}" for i in range(4)]), "each once"
    assert [m["batch_id"] for m in read_committed(markers)] == [0, 1]

    # a takeover: the store's epoch moves on and the new instance fences the old one at the broker
    fencing.take_lease(db, "fraud")
    newer = TransactionalTopic(settings, "fraud", out, markers, "checkpoint-a")
    assert not newer.write(1, records(1, 4))
    with pytest.raises(Fenced):
        writer.write(2, records(2))
    assert writer.expired == 1
    newer.close()
    writer.close()
