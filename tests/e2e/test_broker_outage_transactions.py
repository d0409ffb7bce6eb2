"""A broker outage longer than the transaction timeout, under the fraud job's exactly-once Kafka
writer (`pipelines.fraud.sinks.TransactionalTopic`), on a broker of its own that the test stops
and starts (its own run folder and ports, 29150-29151, so no other test's broker is touched).

- The outage starts while a batch's transaction is open at the broker and lasts longer than the
  producer's transaction.timeout.ms; back, the broker aborts that transaction and bumps the
  producer's epoch, and the producer's next request is answered ProducerFenced. The store still
  gives the writer the job's epoch, so that is no fence (before: `Fenced`, a rejected write and
  exit 3 — a false zombie): the batch is sent again by a new producer.
- A batch written while the broker is down fails within its bounds (flush, commit and abort each
  have one) instead of hanging until the broker is back; Spark's replay of it lands it.
- Nothing lost, nothing twice: read_committed, each batch's records once, each marker once.
"""
from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from controlplane import fencing
from controlplane.store import connect
from infra import broker, kafka_client
from infra.config import load
from infra.topics import ensure_topics
from pipelines.fraud.sinks import Fenced, TransactionalTopic

PORT, CONTROLLER_PORT = 29150, 29151
TXN_TIMEOUT_MS = 3000
# how long a write during the outage may take before it counts as hung: its own bounds add up to
# about 3 + 5 + 2 s; a write without bounds waits for the broker however long it is away
HUNG_S = 120

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory):
    s = load({"CARDSTREAM_RUN_DIR": str(tmp_path_factory.mktemp("kafka-outage")), "KAFKA_PORT": str(PORT),
              "KAFKA_CONTROLLER_PORT": str(CONTROLLER_PORT), "TOPIC_PARTITIONS": "2"})
    try:
        broker.up(s, quiet=True)
        yield s
    finally:
        broker.down(s, quiet=True)


def batch(batch_id: int, n: int = 3) -> list[tuple[bytes, bytes]]:
    return [(f"t-{batch_id}-{i}".encode(), json.dumps({"txn_id": f"t-{batch_id}-{i}"}).encode()) for i in range(n)]


def read_committed(s, topic: str) -> list[dict]:
    return [json.loads(r.value) for r in kafka_client.read_to_end(topic, s)]


def log_ends(s, topic: str) -> tuple[dict, dict]:
    """({partition: end}, {partition: last stable offset}): an open transaction holds the second back."""
    from kafka import TopicPartition

    ends = {}
    for level in ("read_uncommitted", "read_committed"):
        c = kafka_client.consumer(s, isolation_level=level, group_id=None)
        try:
            parts = [TopicPartition(topic, p) for p in kafka_client.partitions(c, topic)]
            ends[level] = {tp.partition: o for tp, o in c.end_offsets(parts).items()}
        finally:
            c.close()
    return ends["read_uncommitted"], ends["read_committed"]


def wait_for(what: str, predicate, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # noqa: BLE001 - the broker is still starting
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


class OutageMidBatch:
    """A batch during whose production the broker goes away: its first record reaches the broker
    (the transaction is open there), the broker stops for twice the transaction timeout, starts
    again and aborts the expired transaction; only then are the other records sent. Iterated
    again (Spark's replay) it is an ordinary batch."""

    def __init__(self, s, topic: str, records: list):
        self.s, self.topic, self.records = s, topic, records
        self.outages = 0

    def __len__(self):
        return len(self.records)

    def __iter__(self):
        if self.outages:
            yield from self.records
            return
        self.outages += 1
        before = sum(log_ends(self.s, self.topic)[0].values())
        yield self.records[0]
        wait_for("the first record in the log", lambda: sum(log_ends(self.s, self.topic)[0].values()) > before)
        broker.down(self.s, quiet=True)
        time.sleep(2 * TXN_TIMEOUT_MS / 1000)  # the outage: longer than the transaction timeout
        broker.up(self.s, quiet=True)
        # the broker aborts the expired transaction: its abort marker lets the LSO reach the end
        wait_for("the broker to abort the expired transaction",
                 lambda: (lambda ends, stable: sum(ends.values()) > before + 1 and ends == stable)(
                     *log_ends(self.s, self.topic)))
        yield from self.records[1:]


def replayed(writer: TransactionalTopic, batch_id: int, records, attempts: int = 10) -> list[str]:
    """Write a batch as Spark runs it: a failed batch is run again; a fence is a failure."""
    errors = []
    for _ in range(attempts):
        try:
            writer.write(batch_id, records)
            return errors
        except Fenced as exc:
            pytest.fail(f"batch {batch_id}: a false fence while the store gives the writer the job: {exc}")
        except Exception as exc:  # noqa: BLE001 - Spark replays a failed batch
            errors.append(f"{type(exc).__name__}: {exc}")
            time.sleep(1)
    raise AssertionError(f"batch {batch_id} never landed: {errors}")


def test_an_outage_longer_than_the_transaction_timeout_is_no_fence_and_loses_nothing(own_broker, tmp_path):
    s = own_broker
    tag = uuid.uuid4().hex[:8]
    out, markers = f"decisions-{tag}", f"markers-{tag}"
    ensure_topics([out, markers], s=s)
    db = connect(tmp_path / "store.db")
    epoch = fencing.take_lease(db, "fraud")
    writer = TransactionalTopic(s, "fraud", out, markers, "checkpoint-a", transaction_timeout_ms=TXN_TIMEOUT_MS,
                                owner=lambda: fencing.current_epoch(db, "fraud") <= epoch)
    assert writer.write(0, batch(0))

    # the outage while batch 1's transaction is open
    outage = OutageMidBatch(s, out, batch(1, 4))
    replayed(writer, 1, outage)
    assert outage.outages == 1
    assert writer.expired == 1, "the broker's abort on the timeout was told from a fence"

    # a batch while the broker is down: it ends (fails) within its bounds, then its replay lands
    broker.down(s, quiet=True)
    ended: list = []
    during = threading.Thread(target=lambda: ended.append(_outcome(writer, 2)), daemon=True)
    during.start()
    during.join(HUNG_S)
    hung = during.is_alive()
    broker.up(s, quiet=True)
    assert not hung, "a batch written while the broker was down hung until it came back"
    assert ended and isinstance(ended[0], Exception) and not isinstance(ended[0], Fenced), ended
    replayed(writer, 2, batch(2))
    assert writer.write(3, batch(3))
    writer.close()

    ids = [d["txn_id"] for d in read_committed(s, out)]
    expected = [f"t-{b}-{i}" for b, n in ((0, 3), (1, 4), (2, 3), (3, 3)) for i in range(n)]
    assert sorted(ids) == sorted(expected), "every record once: nothing lost, nothing twice"
    assert [m["batch_id"] for m in read_committed(s, markers)] == [0, 1, 2, 3]
    assert fencing.current_epoch(db, "fraud") == epoch


def _outcome(writer: TransactionalTopic, batch_id: int):
    try:
        return writer.write(batch_id, batch(batch_id))
    except Exception as exc:  # noqa: BLE001 - what the batch ended with
        return exc
