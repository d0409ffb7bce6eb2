"""The fraud job's sinks (driver side): the store, the `decisions` topic and the dead-letter topic.

- store `decisions`: fenced, idempotent by txn_id, and recorded in the sink ledger with the
  batch's Kafka range (what the auditor's consistent cut reads). A txn_id decided before (a
  producer that sent it twice) keeps its first decision in the store while the topic gets both:
  the batch's `not_kept` row counts those, in the same SQLite transaction.
- Kafka `decisions`: exactly once. One Kafka transaction per batch holds the batch's decisions and
  a marker of (checkpoint id, batch id) in the markers topic; a replayed batch whose marker is
  already committed is skipped. The transactional id is the job's, so a new instance's
  `init_transactions` fences an older one at the broker (a zombie's commit fails) and aborts what
  it left open. A failed send or commit aborts the transaction and fails the batch: Spark
  replays it, nothing is dropped silently. Readers use read_committed.
- Kafka `transactions-dlq`: the same discipline, its own transactional id and markers.

Order per batch: store first (its fencing check stops a zombie before it touches Kafka), then
Kafka, then the `crash-after-sink` hook, then Spark commits.
"""
from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
from collections import Counter
from dataclasses import replace

from controlplane import fencing, ledger
from controlplane.clock import now_ms
from controlplane.store import connect
from infra import kafka_client
from infra.config import Settings
from infra.contracts import DEAD_LETTER_HEAD_BYTES, DECISION_FIELDS, EXIT_FENCED, EXIT_REFUSED
from pipelines.engine import checkpoints
from pipelines.engine.stages import Stages
from pipelines.fraud.features import CARD_HISTORY, FEATURE_LOG_FIELDS
from pipelines.fraud.realtime import EVER, TERMINALS_FILE, TerminalTable
from pipelines.hooks import Faults

JOB = "fraud"
# A dead letter carries at most this many bytes of the raw payload (a 1 MiB message, or 200 KB
# of invalid UTF-8, must not make the dead-letter record itself too large for the broker: at
# most ~6 x this once JSON-escaped); `raw_bytes` says how long the payload was.
DLQ_RAW_LIMIT = DEAD_LETTER_HEAD_BYTES
# The markers topic is read whole when a sink opens (it is compacted: infra/topics.py); the read
# fails only when it stops moving for this long, however long the topic is.
MARKERS_STALL_S = 15.0
_COMPACTED: set[str] = set()  # markers topics this process made sure are compacted
TRANSACTION_BATCH_BYTES = 256 * 1024  # below the broker's 1 MB message.max.bytes
ABORT_WAIT_S = 5.0  # an abort is a courtesy: the next init_transactions (or the broker's timeout) ends it anyway

log = logging.getLogger(JOB)

DECISION_COLUMNS = list(DECISION_FIELDS) + ["batch_id"]
_INSERT = (f"INSERT INTO decisions ({', '.join(DECISION_COLUMNS)}) VALUES "
           f"({', '.join('?' for _ in DECISION_COLUMNS)}) ON CONFLICT(txn_id) DO NOTHING")


DECISION_JSON, FEATURES_JSON = "_decision_json", "_features_json"


def with_payloads(scored):
    """The decisions frame + each decision's Kafka value and its feature-log record as JSON, built
    in the plan (Spark SQL's to_json, in the JVM): the driver only stamps `decided_at` on them. A
    feature-log record is what the decision was made on (FEATURE_LOG_FIELDS) and what it said; a
    model is trained on these joined with the labels, so training and serving see the same
    features, computed once."""
    from pyspark.sql import functions as F

    keep = {"ignoreNullFields": "false"}
    decision = F.to_json(F.struct(*[c for c in DECISION_FIELDS if c != "decided_at"]), keep)
    features = F.to_json(F.struct(*FEATURE_LOG_FIELDS, "model_version"), keep)
    return scored.select("*", decision.alias(DECISION_JSON), features.alias(FEATURES_JSON))


def batch_payloads(table, decided_at: int, batch_id: int) -> tuple[list[str], list[tuple], list[tuple], list[tuple]]:
    """A decisions batch as Arrow -> (txn ids, store rows by DECISION_COLUMNS, decision records,
    feature-log records), each Kafka record (txn_id, JSON) stamped with `decided_at` (pure)."""
    ids = table.column("txn_id").to_pylist()
    stamp = f',"decided_at":{int(decided_at)}}}'
    decisions = [(t.encode(), (j[:-1] + stamp).encode()) for t, j in zip(ids, table.column(DECISION_JSON).to_pylist())]
    features = [(t.encode(), (j[:-1] + stamp).encode()) for t, j in zip(ids, table.column(FEATURES_JSON).to_pylist())]
    n = table.num_rows
    columns = [[decided_at] * n if c == "decided_at" else [batch_id] * n if c == "batch_id"
               else table.column(c).to_pylist() for c in DECISION_COLUMNS]
    return ids, list(zip(*columns)), decisions, features


REPEATED_SHOWN = 10  # txn_ids a `not_kept` row names of the repeats it counts


def repeated_ids(conn, ids: list[str], decided_at: int, batch_id: int, limit: int = REPEATED_SHOWN) -> list[str]:
    """Up to `limit` txn_ids of a batch just inserted that the store did not keep: twice in the
    batch, or decided by an earlier batch (whose row has another decided_at or batch id)."""
    found = {t for t, n in Counter(ids).items() if n > 1}
    for i in range(0, len(ids), 500):
        if len(found) >= limit:
            break
        chunk = ids[i:i + 500]
        found.update(r[0] for r in conn.execute(
            f"SELECT txn_id FROM decisions WHERE txn_id IN ({', '.join('?' for _ in chunk)}) "
            "AND NOT (decided_at = ? AND batch_id = ?) LIMIT ?", [*chunk, decided_at, batch_id, limit]))
    return sorted(found)[:limit]


def count_repeated(conn, batch: ledger.Batch, ids: list[str], kept: int, decided_at: int) -> int:
    """Record the decisions of `batch` the store did not keep (`not_kept`, kind "repeated"): the
    store keeps a txn_id's first decision, Kafka gets every one. Returns how many."""
    repeated = len(ids) - kept
    if repeated > 0:
        conn.execute("INSERT INTO not_kept (job, query, checkpoint, batch_id, kind, count, detail, ts) "
                     "VALUES (?, ?, ?, ?, 'repeated', ?, ?, ?) ON CONFLICT (query, checkpoint, batch_id, kind) "
                     "DO UPDATE SET count = excluded.count, detail = excluded.detail, ts = excluded.ts",
                     (JOB, batch.sink, batch.checkpoint_id, batch.batch_id, repeated,
                      json.dumps(repeated_ids(conn, ids, decided_at, batch.batch_id)), now_ms()))
    return max(repeated, 0)


def decision_records(rows: list[dict], decided_at: int, batch_id: int) -> list[dict]:
    """Scored rows (with score/is_fraud) -> Decision dicts as the contract says (pure)."""
    out = []
    for r in rows:
        d = {name: r.get(name) for name in DECISION_FIELDS}
        d["decided_at"] = decided_at
        d["is_fraud"], d["is_late"] = bool(d["is_fraud"]), bool(d["is_late"])
        d["model_version"] = int(d["model_version"] or 0)
        d["batch_id"] = batch_id
        out.append(d)
    return out


def _payload_head(raw) -> tuple[bytes, int]:
    """(first DLQ_RAW_LIMIT bytes, size in bytes) of what the parser gives as `raw`: a struct of
    the payload's head and size (pipelines/engine/sources.py), or the payload itself."""
    if isinstance(raw, dict):
        head, size = raw.get("head"), raw.get("size")
    else:
        head, size = raw, None
    if head is None:
        head = b""
    elif isinstance(head, str):
        head = head.encode("utf-8", "surrogatepass")
    else:
        head = bytes(head)
    size = size if isinstance(size, int) and size >= len(head) else len(head)
    return head[:DLQ_RAW_LIMIT], size


def _as_text(head: bytes, truncated: bool) -> tuple[str, str]:
    """(text, encoding): the bytes as UTF-8 text, or as base64 when they are not valid UTF-8. A
    character cut in two by the truncation is dropped rather than making the whole head base64."""
    try:
        return head.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as exc:
        if truncated and exc.end == len(head) and exc.reason == "unexpected end of data":
            try:
                return head[:exc.start].decode("utf-8"), "utf-8"
            except UnicodeDecodeError:
                pass
        return base64.b64encode(head).decode("ascii"), "base64"


def dead_letter(row: dict, topic: str, ts: int) -> dict:
    """One dead-letter record (pure, and it cannot fail): the reason, where the record came from
    (topic, partition, offset), its size in bytes, and the first DLQ_RAW_LIMIT bytes of the
    payload, as text when they are UTF-8 and as base64 (`raw_encoding`) when they are not. Built
    from the raw Kafka bytes, so invalid UTF-8 is never expanded."""
    head, size = _payload_head(row.get("raw"))
    truncated = size > len(head)
    text, encoding = _as_text(head, truncated)
    return {"reason": str(row.get("dlq_reason") or "unknown"), "raw": text, "raw_encoding": encoding,
            "raw_bytes": size, "raw_truncated": truncated, "partition": row.get("partition"),
            "offset": row.get("offset"), "topic": topic, "ts": ts}


def count_dead_letters(conn, reasons, ts: int) -> None:
    """Add dead letters to the store's counts by reason (inside the caller's fenced write)."""
    counts = Counter(reasons)
    conn.executemany("INSERT INTO dead_letters (reason, count, updated_at) VALUES (?, ?, ?) "
                     "ON CONFLICT(reason) DO UPDATE SET count = count + excluded.count, "
                     "updated_at = excluded.updated_at", [(reason, n, ts) for reason, n in counts.items()])


class Fenced(RuntimeError):
    """The broker or the store says a newer instance owns the job."""


class TransactionExpired(RuntimeError):
    """The broker ended this producer's transaction (its timeout passed, during a long broker
    outage) while the store says this instance still owns the job: not a fence. The batch fails
    and Spark replays it; nothing of the ended transaction is readable."""


def fence_answer(exc: BaseException):
    """The broker's ProducerFenced / InvalidProducerEpoch answer behind `exc`, or None. kafka-python
    raises it as is, or, for a send made after its sender thread already got it (the batch's first
    send adds a partition, the broker fences that request, the next send finds the error), wrapped
    in a KafkaError that carries it as its last argument."""
    from kafka.errors import InvalidProducerEpochError, ProducerFencedError

    fences = (ProducerFencedError, InvalidProducerEpochError)
    if isinstance(exc, fences):
        return exc
    return next((a for a in getattr(exc, "args", ()) if isinstance(a, fences)), None)


class TransactionalTopic:
    """Writes each batch's records to a topic exactly once, in one Kafka transaction with a marker.

    The marker (key: `<stream>:<checkpoint id>`, value: batch id and record count) goes to the
    markers topic in the same transaction, so "this batch is in the topic" and "its marker is
    committed" are one fact. `last_committed` is read back from the markers at start.
    """

    def __init__(self, s: Settings, stream: str, topic: str, markers_topic: str, checkpoint_id: str,
                 owner=None, **producer_config):
        """`owner()`: whether this instance still holds the job's newest fencing epoch in the store,
        the arbiter when the broker answers ProducerFenced/InvalidProducerEpoch (None: no arbiter,
        every such answer is a fence)."""
        self.s, self.stream, self.topic, self.markers = s, stream, topic, markers_topic
        self.checkpoint_id = checkpoint_id
        self.owner = owner
        self.expired = 0  # transactions the broker ended on its timeout while we owned the job
        delivery = s.kafka_delivery_timeout_ms
        # batch_size: a batch's records go out together at its flush anyway; kafka-python's 16 KB
        # batches (a dozen feature-log records each) cost a wake-up of its sender and a record batch
        # per 16 KB: 256 KB took a 300-decision batch's write from 37 to 23 ms (2026-11-26)
        self.config = {"transactional_id": f"cardstream-{stream}-{topic}", "acks": "all", "linger_ms": 5,
                       "batch_size": TRANSACTION_BATCH_BYTES,
                       "delivery_timeout_ms": delivery, "request_timeout_ms": max(1000, min(30_000, delivery // 2)),
                       "max_block_ms": max(1000, min(60_000, delivery)), **producer_config}
        self.producer = None
        self.last_committed: int | None = None
        self._opening = threading.Lock()  # `prepare`'s thread and the first batch open it once

    @property
    def marker_key(self) -> bytes:
        return f"{self.stream}:{self.checkpoint_id}".encode()

    def _ready(self):
        with self._opening:
            if self.producer is None:
                producer = kafka_client.producer(self.s, **self.config)
                try:
                    producer.init_transactions()  # fences older instances, aborts what they left open
                    self._ensure_compacted()
                    self.last_committed = self._last_marker()
                except Exception:
                    _close(producer, 1)
                    raise
                self.producer = producer
            return self.producer

    def _ensure_compacted(self) -> None:
        """Once per process and markers topic: make it compacted (infra/topics.py), so the whole
        topic stays short to read. A broker that refuses (an ACL) leaves it as it is: the read is
        as correct, only longer."""
        if self.markers in _COMPACTED:
            return
        from infra.topics import ensure_compacted

        try:
            ensure_compacted(self.markers, self.s)
        except Exception as exc:  # noqa: BLE001 - correctness does not depend on it
            log.warning("%s: could not make the markers topic %s compacted (%s); it is read whole all the same",
                        self.stream, self.markers, exc)
        _COMPACTED.add(self.markers)

    def _last_marker(self) -> int | None:
        """The newest batch id committed for this checkpoint: every committed marker of its key,
        read from the beginning of each markers partition to its end (read_committed). No window:
        the markers of other streams and checkpoints, and the transactions' control records, may
        be any number after ours. Fails only when the read stops moving for MARKERS_STALL_S."""
        from kafka import TopicPartition

        c = kafka_client.consumer(self.s, isolation_level="read_committed", group_id=None)
        try:
            best = None
            parts = [TopicPartition(self.markers, p) for p in kafka_client.partitions(c, self.markers)]
            if not parts:
                return None
            ends = c.end_offsets(parts)
            starts = c.beginning_offsets(parts)
            c.assign(parts)
            for tp in parts:
                c.seek(tp, starts[tp])
            behind = lambda: sum(max(0, ends[tp] - c.position(tp)) for tp in parts)  # noqa: E731
            left, moved = behind(), time.monotonic()
            while left and time.monotonic() - moved < MARKERS_STALL_S:
                for records in c.poll(timeout_ms=500).values():
                    for r in records:
                        if r.key == self.marker_key:
                            best = max(best if best is not None else -1, json.loads(r.value)["batch_id"])
                now_left = behind()
                if now_left < left:
                    left, moved = now_left, time.monotonic()
            if left:
                raise RuntimeError(f"could not read the markers topic {self.markers} to its end: {left} record(s) "
                                   f"still unread after {MARKERS_STALL_S:.0f} s without progress")
            return best
        finally:
            c.close()

    def write(self, batch_id: int, records: list[tuple[bytes | None, bytes]],
              extra: dict[str, list[tuple[bytes | None, bytes]]] | None = None, *, _expired: bool = False) -> bool:
        """Send the batch in one transaction; False when its marker was already committed.
        `extra`: records for other topics that belong to the same batch (the feature log), in the
        same transaction: all of them are in their topics, or none.

        Every wait is bounded (the flush and the commit each by the producer's transaction timeout,
        after which the broker aborts the transaction anyway; the abort by ABORT_WAIT_S):
        a broker outage fails the batch, which Spark replays, instead of hanging it. A
        ProducerFenced or InvalidProducerEpoch answer is a fence only when the store's epoch says
        so (`owner`); otherwise the broker ended our transaction on its timeout (a long outage
        bumps the producer epoch) and the batch is sent again, once, by a new producer, which
        first reads the markers (the batch is skipped if it did commit)."""
        producer = self._ready()
        if self.last_committed is not None and batch_id <= self.last_committed:
            return False
        try:
            producer.begin_transaction()
            wait_s = producer.config["transaction_timeout_ms"] / 1000  # the broker aborts it after this anyway
            futures = [producer.send(self.topic, key=k, value=v) for k, v in records]
            futures += [producer.send(topic, key=k, value=v) for topic, more in (extra or {}).items() for k, v in more]
            marker = {"stream": self.stream, "checkpoint_id": self.checkpoint_id, "batch_id": batch_id,
                      "records": len(records), "ts": now_ms()}
            futures.append(producer.send(self.markers, key=self.marker_key, value=json.dumps(marker).encode()))
            producer.flush(timeout=wait_s)
            for f in futures:
                f.get(timeout=0)  # the send's own error, if it failed
            self._end(producer, True, wait_s)
        except Exception as raised:
            exc = fence_answer(raised)
            if exc is None:
                self._discard(abort=True)
                raise
            self._discard()
            if not self._owns_job():
                raise Fenced(f"{self.stream}: the broker fenced this producer: {exc}") from exc
            if _expired:
                raise TransactionExpired(
                    f"{self.stream}: batch {batch_id}: the broker ended this producer's transaction again ({exc!r}) "
                    f"while this instance holds the job's epoch; the batch fails and is replayed") from exc
            self.expired += 1
            log.warning("%s: batch %s: the broker ended the transaction (%r) but the store says this instance still "
                        "owns the job: its transaction timed out (a broker outage), not a fence; sending the batch "
                        "again with a new producer", self.stream, batch_id, exc)
            return self.write(batch_id, records, extra, _expired=True)
        self.last_committed = batch_id
        return True

    def _discard(self, abort: bool = False) -> None:
        """Drop the producer after a failure; the next write starts a fresh one (and re-reads the
        markers, in case the transaction did commit before the error reached us)."""
        producer, self.producer = self.producer, None
        if producer is None:
            return
        try:
            if abort:
                self._end(producer, False, ABORT_WAIT_S)
        except Exception:  # noqa: BLE001 - the next init_transactions aborts it anyway
            pass
        _close(producer, 1)

    def _owns_job(self) -> bool:
        if self.owner is None:
            return False
        try:
            return bool(self.owner())
        except Exception as exc:  # noqa: BLE001 - an unreadable store proves nothing: treat it as a fence
            log.warning("%s: could not read the job's epoch from the store (%s)", self.stream, exc)
            return False

    @staticmethod
    def _end(producer, commit: bool, timeout_s: float) -> None:
        """commit_transaction() / abort_transaction() with a bound: kafka-python 3.0.12 waits on
        the end of a transaction without one (its TransactionalRequestResult.wait takes one, the
        producer's methods pass none), so this is those methods' own body with a timeout."""
        from kafka.errors import KafkaTimeoutError

        manager = producer._transaction_manager
        result = manager.begin_commit() if commit else manager.begin_abort()
        producer._sender.wakeup()
        if not result.wait(timeout_ms=max(1.0, timeout_s * 1000)):
            raise KafkaTimeoutError(f"the transaction was not {'committed' if commit else 'aborted'} "
                                    f"within {max(0.0, timeout_s):.1f} s")

    def close(self) -> None:
        if self.producer is not None:
            _close(self.producer, 5)
            self.producer = None


def _close(producer, timeout_s: float) -> None:
    """Close a producer within `timeout_s`, whatever it still holds: kafka-python's close()
    flushes first and raises when records cannot be delivered (a broker outage), leaving its I/O
    thread running; then its pending records are failed (the transaction they belong to is never
    committed) and the thread stopped."""
    try:
        producer.close(timeout=timeout_s)
        return
    except Exception:  # noqa: BLE001 - records the broker never took
        pass
    sender = getattr(producer, "_sender", None)
    if sender is not None:
        sender.force_close()
        sender.join(timeout_s)
    try:
        producer.close(timeout=0)
    except Exception:  # noqa: BLE001
        pass


def scored_table(batch_df):
    """A decisions batch (scored, with the aggregator's verdict: `job.verdict`) collected to the
    driver as Arrow: the batch's Spark work (the standby's rehearsal runs it too, so a takeover
    finds it warm)."""
    return batch_df.toArrow()


class Sinks:
    """The store (fenced, idempotent) and Kafka (exactly once) writers of the job's driver."""

    def __init__(self, o, s: Settings, epoch: int, faults: Faults | None = None):
        self.o, self.s, self.epoch = o, s, epoch
        self.write_profiles = o.mode == "realtime"  # the real-time path reads the profiles we keep
        # ... and the terminal features of our decisions (the real-time model's, pipelines/fraud/realtime.py)
        self.terminals = None
        if o.mode == "realtime":
            # a companion starting on the topic's start holds every terminal it will ever have decided
            fresh = not checkpoints.query_id(o.checkpoint / "decisions") and o.starting_offsets == "earliest"
            self.terminals = TerminalTable(o.local_files / TERMINALS_FILE, s.label_delay_days * 86_400_000,
                                           EVER if fresh else None)
        self.db = connect(o.store_path, synchronous="FULL")  # durable before Spark commits (docs/recovery.md)
        self.dlq_db = connect(o.store_path, synchronous="FULL")  # the dead-letter query runs on its own thread
        self.faults = faults
        self._topics: dict[str, TransactionalTopic] = {}
        self.decided = self.late = self.fraud = 0

    def prepare(self) -> threading.Thread | None:
        """Open the Kafka transactions of checkpoints that already exist (a restart, a takeover) on
        a thread of their own, while Spark plans and runs the first batch: `init_transactions`
        (which fences the old instance at the broker) and the read of the last markers then no
        longer wait until that batch is computed. A failure here is only logged: the first write
        opens the topic itself, and fails its batch if it cannot."""
        streams = [(stream, topic, checkpoint) for stream, topic, checkpoint in (
            (JOB, self.o.decisions_topic, self.o.checkpoint / "decisions"),
            (f"{JOB}-dlq", self.o.dlq_topic, self.o.checkpoint / "dlq")) if checkpoints.query_id(checkpoint)]
        if not streams:
            return None
        topics = [self.topic(*stream) for stream in streams]

        def open_all():
            for t in topics:
                try:
                    t._ready()
                except Exception as exc:  # noqa: BLE001 - the batch's own write tries again
                    log.warning("%s: could not open the Kafka transaction ahead of the first batch: %s", t.stream, exc)

        thread = threading.Thread(target=open_all, name=f"{JOB}-open-transactions", daemon=True)
        thread.start()
        return thread

    def topic(self, stream: str, topic: str, checkpoint) -> TransactionalTopic:
        if stream not in self._topics:
            self._topics[stream] = TransactionalTopic(self.s, stream, topic, self.o.markers_topic,
                                                      checkpoints.query_id(checkpoint) or "", owner=self.owns_job)
        return self._topics[stream]

    def owns_job(self) -> bool:
        """Whether the store still gives this instance the job's newest epoch: the arbiter when the
        broker ends a transaction with ProducerFenced (a takeover, or only its transaction timeout
        after a long outage)."""
        db = connect(self.o.store_path)
        try:
            return fencing.is_current(db, JOB, self.epoch)
        finally:
            db.conn.close()

    def fenced(self, db, exc: Exception, what: str) -> None:
        fencing.record_rejection(db, JOB, self.epoch, what)
        log.error("fenced: %s; a newer instance owns the job, exiting.", exc)
        logging.shutdown()
        os._exit(EXIT_FENCED)

    def refused(self, exc: Exception) -> None:
        """The checkpoint hands a batch id the store applied over another Kafka range: say so in
        one sentence and exit 2 before anything of the batch is written (the supervisor does not
        restart a refusal)."""
        log.error("%s", exc)
        logging.shutdown()
        os._exit(EXIT_REFUSED)

    def decisions(self, batch_df, batch_id: int) -> None:
        clock = Stages()
        table = scored_table(batch_df)
        clock.lap("compute_ms")
        if table.num_rows == 0:
            return
        decided_at = now_ms()
        ids, store_rows, payloads, features = batch_payloads(table, decided_at, batch_id)
        if self.faults:
            self.faults.check_poison(ids)  # as `decide` does record by record
        checkpoint = self.o.checkpoint / "decisions"
        fraud = sum(v for v in table.column("is_fraud").to_pylist() if v)
        batch = replace(checkpoints.ledger_batch(JOB, checkpoint, batch_id), processed=len(ids), fraud=fraud)
        what = f"decisions batch {batch_id}"
        clock.lap("decide_ms")
        try:
            with fencing.fenced_write(self.db, JOB, self.epoch, what) as conn:
                if ledger.apply_once(conn, batch, self.epoch):
                    kept = conn.executemany(_INSERT, store_rows).rowcount
                    count_repeated(conn, batch, ids, kept, decided_at)
                    if self.write_profiles:
                        write_profiles(conn, table.select(["card_id", *PROFILE_COLUMNS, CARD_HISTORY]).to_pylist(), batch)
            clock.lap("store_ms")
            self.topic(JOB, self.o.decisions_topic, checkpoint).write(
                batch_id, payloads, {self.o.features_topic: features})
            clock.lap("kafka_ms")
            if self.terminals is not None:
                try:
                    self.terminals.update(table)
                except OSError as exc:  # the real-time path keeps the table it has; decisions go on
                    log.warning("could not publish the terminal features for the real-time path: %s", exc)
            clock.record(self.db, JOB, batch_id, len(ids))
        except (fencing.FencedError, Fenced) as exc:
            self.fenced(self.db, exc, what)
        except ledger.ReusedBatch as exc:
            self.refused(exc)
        self.decided += len(ids)
        self.late += sum(v for v in table.column("is_late").to_pylist() if v)
        self.fraud += batch.fraud
        if self.faults:
            self.faults.after_sink(self.db, JOB, batch_id, len(ids))

    def decide(self, rows: list[dict], decided_at: int, batch_id: int) -> tuple[list[dict], list[tuple]]:
        """The per-record part of a decisions batch, on the driver: scored rows -> decisions and
        their Kafka payloads. The poison-batch rule runs the same function on single records to
        find the ones a failing batch cannot process (pipelines/fraud/quarantine.py)."""
        records = decision_records(rows, decided_at, batch_id)
        if self.faults:
            self.faults.check_poison(d["txn_id"] for d in records)
        payloads = [(d["txn_id"].encode(), json.dumps({k: d[k] for k in DECISION_FIELDS}).encode())
                    for d in records]
        return records, payloads

    def dead_letters(self, batch_df, batch_id: int) -> None:
        rows = batch_df.select("raw", "dlq_reason", "partition", "offset").toArrow().to_pylist()
        if not rows:
            return
        ts = now_ms()
        letters = [dead_letter(r, self.o.transactions_topic, ts) for r in rows]
        checkpoint = self.o.checkpoint / "dlq"
        batch = replace(checkpoints.ledger_batch(f"{JOB}-dlq", checkpoint, batch_id), processed=len(rows))
        what = f"dead letters batch {batch_id}"
        try:
            with fencing.fenced_write(self.dlq_db, JOB, self.epoch, what) as conn:
                if ledger.apply_once(conn, batch, self.epoch):
                    count_dead_letters(conn, [r["dlq_reason"] for r in rows], ts)
            self.topic(f"{JOB}-dlq", self.o.dlq_topic, checkpoint).write(
                batch_id, [(None, json.dumps(letter).encode()) for letter in letters])
        except (fencing.FencedError, Fenced) as exc:
            self.fenced(self.dlq_db, exc, what)
        except ledger.ReusedBatch as exc:
            self.refused(exc)

    def close(self) -> None:
        for t in self._topics.values():
            t.close()


PROFILE_COLUMNS = ("p_count", "p_mean", "p_lat", "p_lon", "p_time", "p_times")


def write_profiles(conn, rows: list[dict], batch: ledger.Batch) -> None:
    """The latest profile per card of this batch -> `card_profiles`, and the batch's end offsets as
    the profiles' cut (`card_profile_cuts`), in the caller's transaction: a real-time start seeds
    from exactly the offsets the profiles cover, never from a later batch that wrote none (the
    fraud job writes profiles in real-time mode only). With them each card's event-time history
    after the batch (CARD_HISTORY, on one row of the card), the model's card windows."""
    now = now_ms()
    conn.execute("INSERT INTO card_profile_cuts (sink, checkpoint_id, batch_id, end_offsets, ts) VALUES (?, ?, ?, ?, ?) "
                 "ON CONFLICT(sink) DO UPDATE SET checkpoint_id = excluded.checkpoint_id, batch_id = excluded.batch_id, "
                 "end_offsets = excluded.end_offsets, ts = excluded.ts",
                 (batch.sink, batch.checkpoint_id, batch.batch_id, json.dumps(batch.end_offsets), now))
    latest: dict[str, dict] = {}
    history: dict[str, str] = {}
    for r in rows:
        latest[r["card_id"]] = r
        if r.get(CARD_HISTORY) is not None:
            history[r["card_id"]] = r[CARD_HISTORY]
    conn.executemany(
        "INSERT INTO card_profiles (card_id, count, mean, lat, lon, place_time, times, updated_at, history) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(card_id) DO UPDATE SET count = excluded.count, "
        "mean = excluded.mean, lat = excluded.lat, lon = excluded.lon, place_time = excluded.place_time, "
        "times = excluded.times, updated_at = excluded.updated_at, "
        "history = coalesce(excluded.history, card_profiles.history)",
        [(c, r["p_count"], r["p_mean"], r["p_lat"], r["p_lon"], r["p_time"], r["p_times"], now, history.get(c))
         for c, r in latest.items()])
