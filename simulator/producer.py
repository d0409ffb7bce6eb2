"""A kafka-python producer that loses nothing, fed whole batches of records at a time.

Settings that lose nothing: idempotence on (the broker drops a retried batch it already has, by
producer id and sequence number), `acks=all`, unlimited retries within a 2-minute delivery timeout,
at most 5 requests in flight (what idempotence allows while keeping order per partition).

kafka-python encodes every record in Python, and its `send()` costs ~35 us per message, far too
slow for 20,000 transactions (40,000 messages with the labels) a second. So records are appended
to the producer's own accumulator in bulk: one lock per partition and call, the record encoding
inlined with precomputed varints, no per-record future. Everything after that is kafka-python's
own sender thread: draining, idempotent sequence numbers, retries, timeouts, acknowledgements.
What is delivered or failed is counted from one callback per batch (the batch's produce future,
which completes with the broker's answer), never assumed. The bulk path relies on the internals
of the pinned kafka-python release; on any other release the producer falls back to the public
`send()` with one callback per record.
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass, replace

import numpy as np

import kafka
from kafka import KafkaProducer
from kafka.errors import KafkaError
from kafka.structs import TopicPartition

from infra import kafka_client
from infra.config import load
from infra.partitioner import partitions_for

# The kafka-python releases whose accumulator internals the bulk path was written against.
BULK_TESTED = ("3.0.12",)
BATCH_BYTES = 256 * 1024      # well under the broker's 1 MiB message.max.bytes: a batch never splits
LINGER_MS = 5
MAX_OUTSTANDING = 50_000      # records appended but not yet acknowledged: the backpressure bound


class ProducerError(SystemExit):
    """A producer problem, said in one sentence."""


def _varint(value: int) -> bytes:
    """Kafka's zig-zag varint of a non-negative int."""
    value <<= 1
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_VARINTS = [_varint(i) for i in range(1 << 15)]


def varint(value: int) -> bytes:
    return _VARINTS[value] if value < 32768 else _varint(value)


def headers_bytes(headers: list[tuple[str, bytes]] | None) -> bytes:
    """The end of a v2 record: its headers' count, then each header's key (UTF-8) and value, all
    length-prefixed with varints (b"\x00": no headers). Every record of one append shares them."""
    if not headers:
        return b"\x00"
    out = [varint(len(headers))]
    for key, value in headers:
        k = key.encode("utf-8")
        out += [varint(len(k)), k, varint(len(value)), value]
    return b"".join(out)


def fill(mrb, keys: list[bytes], values: list[bytes], i: int, stamp_ms: int, limit: int,
         tail: bytes = b"\x00") -> tuple[int, int]:
    """Encode records keys[i:], values[i:] (timestamp `stamp_ms`, ending in `tail`: the headers)
    into the open v2 MemoryRecordsBuilder `mrb` until the next one would pass `limit` bytes (the
    first record always goes in). Returns (the index of the first record not appended, the
    biggest record's size); the builder's offsets, count and timestamps are kept as its own
    `append` keeps them, and the bytes are those `append` writes (tests/unit/test_replay.py)."""
    vi = _VARINTS
    builder = mrb._builder
    buf = builder._buffer
    if builder._first_timestamp is None:
        builder._first_timestamp = stamp_ms
        builder._max_timestamp = stamp_ms
    delta = stamp_ms - builder._first_timestamp
    head = b"\x00" + (vi[delta] if 0 <= delta < 32768 else _varint(max(delta, 0)))
    offset = mrb._next_offset
    start = offset
    size = len(buf)
    biggest = 0
    n = len(keys)
    while i < n:
        key, value = keys[i], values[i]
        lk, lv = len(key), len(value)
        body = b"".join((head, vi[offset] if offset < 32768 else _varint(offset),
                         vi[lk] if lk < 32768 else _varint(lk), key,
                         vi[lv] if lv < 32768 else _varint(lv), value, tail))
        lb = len(body)
        record = (vi[lb] if lb < 32768 else _varint(lb)) + body
        if size + len(record) > limit and offset > 0:
            break
        buf += record
        size += len(record)
        if len(record) > biggest:
            biggest = len(record)
        offset += 1
        i += 1
    appended = offset - start
    if appended:
        mrb._next_offset = offset
        builder._num_records += appended
        builder._last_offset = offset - 1
        if stamp_ms > builder._max_timestamp:
            builder._max_timestamp = stamp_ms
    return i, biggest


def reachable(bootstrap: str, timeout: float = 3.0) -> bool:
    """True when a TCP connection to any of the bootstrap servers opens within `timeout`."""
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
                return True
        except (OSError, ValueError):
            continue
    return False


@dataclass
class TopicStats:
    appended: int = 0
    sent: int = 0
    failed: int = 0


class Producer:
    """Bulk appends of (key, value) records, their delivery counted per topic from the broker's answers."""

    def __init__(self, bootstrap: str, *, linger_ms: int = LINGER_MS, batch_bytes: int = BATCH_BYTES,
                 client_id: str = "cardstream-simulator", bulk: bool | None = None,
                 max_outstanding: int = MAX_OUTSTANDING, connect_timeout: float = 3.0):
        if not reachable(bootstrap, connect_timeout):
            raise ProducerError(f"Cannot reach the Kafka broker at {bootstrap}: start it with `make kafka-up`, "
                                f"or point KAFKA_BOOTSTRAP at a running one.")
        # a refused login is said at once (a raw SASL exchange), not after the client's bootstrap timeout
        try:
            refused = kafka_client.login_error(replace(load(), external_bootstrap=bootstrap))
        except kafka_client.UnreadableCAFile as exc:
            raise ProducerError(str(exc)) from None
        if refused:
            raise ProducerError(refused)
        try:
            self.kp = KafkaProducer(
                **{**kafka_client.client_config(), "bootstrap_servers": bootstrap.split(",")}, client_id=client_id,
                enable_idempotence=True, acks="all", retries=2**31 - 1,
                max_in_flight_requests_per_connection=5, delivery_timeout_ms=120_000,
                request_timeout_ms=30_000, linger_ms=linger_ms, batch_size=batch_bytes,
                max_block_ms=15_000, bootstrap_timeout_ms=8_000,
                reconnect_backoff_max_ms=1_000)  # back within a second of a broker restart
        except KafkaError as exc:
            raise ProducerError(f"The Kafka broker at {bootstrap} did not answer as a Kafka broker "
                                f"({type(exc).__name__}).") from None
        self.batch_bytes = batch_bytes
        self.max_outstanding = max_outstanding
        self.bulk = self._bulk_supported() if bulk is None else bulk
        self.stats: dict[str, TopicStats] = {}
        self._lock = threading.Lock()
        self._partitions: dict[str, int] = {}

    # ------------------------------------------------------------------ public
    def partition_count(self, topic: str) -> int:
        if topic not in self._partitions:
            try:
                parts = self.kp.partitions_for(topic)
            except KafkaError as exc:
                raise ProducerError(f"Kafka gave no metadata for topic {topic!r} ({type(exc).__name__}).") from None
            if not parts:
                raise ProducerError(f"Topic {topic!r} has no partitions on the broker.")
            self._partitions[topic] = len(parts)
        return self._partitions[topic]

    def send_many(self, topic: str, keys: list[bytes], values: list[bytes], stamp_ms: int,
                  headers: list[tuple[str, bytes]] | None = None) -> None:
        """Append records (in this order per partition) with Kafka timestamp `stamp_ms`, each with
        the same `headers` ((key, value) pairs) if any."""
        if not keys:
            return
        n_parts = self.partition_count(topic)
        parts = partitions_for(keys, n_parts)
        stats = self._stats(topic)
        with self._lock:
            stats.appended += len(keys)
        if not self.bulk:
            self._send_public(topic, keys, values, parts, stamp_ms, stats, headers)
            return
        tail = headers_bytes(headers)
        wake = False
        for p in range(n_parts):
            idx = np.flatnonzero(parts == p)
            if len(idx) == 0:
                continue
            if len(idx) == len(keys):
                k, v = keys, values
            else:
                il = idx.tolist()
                k = [keys[i] for i in il]
                v = [values[i] for i in il]
            wake |= self._append(TopicPartition(topic, p), k, v, stamp_ms, stats, tail)
        if wake:
            self.kp._sender.wakeup()

    @property
    def outstanding(self) -> int:
        with self._lock:
            return sum(s.appended - s.sent - s.failed for s in self.stats.values())

    def wait_for_room(self, stop=lambda: False) -> None:
        """Block while too many records are unacknowledged (the accumulator itself is unbounded)."""
        while self.outstanding > self.max_outstanding and not stop():
            time.sleep(0.002)

    def totals(self, topic: str) -> TopicStats:
        with self._lock:
            s = self._stats(topic)
            return TopicStats(s.appended, s.sent, s.failed)

    def flush(self, timeout: float | None = 60.0) -> bool:
        """Send everything appended and wait for the broker's answers; False if that timed out."""
        try:
            self.kp.flush(timeout=timeout)
            return True
        except KafkaError:
            return False

    def close(self, timeout: float = 10.0) -> None:
        self.kp.close(timeout=timeout)

    # ------------------------------------------------------------------ delivery accounting
    def _stats(self, topic: str) -> TopicStats:
        stats = self.stats.get(topic)
        if stats is None:
            stats = self.stats.setdefault(topic, TopicStats())
        return stats

    def _batch_done(self, stats: TopicStats, batch, result) -> None:
        """The sender thread's callback when a batch's fate is final (acknowledged or failed)."""
        _, _, record_errors = result
        n = batch.record_count
        with self._lock:
            if record_errors is None:
                stats.sent += n
            else:
                stats.failed += n

    def _record_done(self, stats: TopicStats, stamp_ms: int, _metadata) -> None:
        with self._lock:
            stats.sent += 1

    def _record_failed(self, stats: TopicStats, _exc) -> None:
        with self._lock:
            stats.failed += 1

    # ------------------------------------------------------------------ the two append paths
    def _send_public(self, topic, keys, values, parts, stamp_ms, stats, headers=None) -> None:
        send = self.kp.send
        for key, value, p in zip(keys, values, parts.tolist()):
            future = send(topic, value=value, key=key, partition=p, timestamp_ms=stamp_ms, headers=headers)
            future.add_callback(self._record_done, stats, stamp_ms)
            future.add_errback(self._record_failed, stats)

    def _bulk_supported(self) -> bool:
        acc = getattr(self.kp, "_accumulator", None)
        ok = (kafka.__version__ in BULK_TESTED and acc is not None
              and all(hasattr(acc, a) for a in ("_batches", "_tp_lock", "_incomplete", "_appends_in_progress"))
              and hasattr(self.kp, "_sender"))
        if not ok:
            logging.getLogger("simulator").warning(
                "kafka-python %s is not one the bulk path was tested with; using the slower per-record send().",
                kafka.__version__)
        return ok

    def _new_batch(self, tp: TopicPartition, stats: TopicStats, now: float):
        from kafka.producer.producer_batch import ProducerBatch
        from kafka.record.memory_records import MemoryRecordsBuilder

        acc = self.kp._accumulator
        records = MemoryRecordsBuilder(acc.config["message_version"], acc.config["compression_attrs"],
                                       self.batch_bytes)
        batch = ProducerBatch(tp, records, now=now)
        batch.cs_bulk = True  # ours: appended to in place by _append
        batch.produce_future.add_callback(self._batch_done, stats, batch)
        return batch

    def _append(self, tp: TopicPartition, keys: list[bytes], values: list[bytes], stamp_ms: int,
                stats: TopicStats, tail: bytes = b"\x00") -> bool:
        """Append records to tp's open batch (opening new ones as they fill); True if the sender should wake."""
        acc = self.kp._accumulator
        now = time.monotonic()
        limit = self.batch_bytes
        wake = False
        acc._appends_in_progress.increment()
        try:
            with acc._tp_lock(tp):
                dq = acc._batches[tp]
                batch = dq[-1] if dq else None
                i, n = 0, len(keys)
                while i < n:
                    mrb = batch.records if batch is not None else None
                    if mrb is None or mrb._closed or not hasattr(batch, "cs_bulk") or mrb.is_full():
                        batch = self._new_batch(tp, stats, now)
                        dq.append(batch)
                        acc._incomplete.add(batch)
                        mrb = batch.records
                        wake = True
                    start = i
                    i, biggest = fill(mrb, keys, values, i, stamp_ms, limit, tail)
                    if i > start:
                        if biggest > batch.max_record_size:
                            batch.max_record_size = biggest
                        batch.last_append = now
                    if i < n:  # this batch is full: the next record opens a new one
                        batch = None
                        wake = True
                if len(dq) > 1:
                    wake = True
        finally:
            acc._appends_in_progress.decrement()
        return wake
