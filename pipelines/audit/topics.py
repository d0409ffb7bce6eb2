"""Topics read for the audit, incrementally and read_committed: each record's offset, txn_id code,
flags and append time, kept per partition in numpy arrays the cut can slice by offset.

Memory is bounded: an index keeps only what some figure still needs (`trim`): the records no cut
has folded yet, and the horizon (`AUDIT_HORIZON_MINUTES`) the paths and the duplicate checks
look back over. A txn_id is kept as its 64-bit hash (`code`), never as the string: when the
fraud cut needs the strings of the transactions it folds (to look them up in the store),
`take_ids` reads just that offset range again from Kafka. So a fraud job far behind costs the
auditor the arrays' 26 bytes per record it has not folded, not a Python string each.
"""
from __future__ import annotations

import json

import numpy as np
from kafka import TopicPartition

from infra import kafka_client
from pipelines.audit.cut import Partition

# The code of a record the input contract rejects (a dead letter): indexed, so offsets and lag
# stay whole, but never a txn_id of the truth. Python's str hash never returns -1.
INVALID = -1


def code(txn_id: str) -> int:
    """A txn_id's code: its 64-bit hash in this process (codes are never persisted)."""
    return hash(txn_id)


class TopicIndex:
    def __init__(self, s, topic: str, on_doc=None, reject=None):
        """`reject(value, timestamp, headers)`: whether a record breaks the input contract (it is indexed
        as INVALID, whatever txn_id it carries). `on_doc(doc) -> bool`: the record's `bad` flag
        (the labels mark malformed inputs so)."""
        self.s, self.topic, self.on_doc, self.reject = s, topic, on_doc, reject
        self._new: dict[int, tuple[list, list, list, list, list]] = {}
        self._parts: dict[int, Partition] = {}
        self.ids_from: dict[int, int] = {}      # partition -> first offset whose txn_id was not taken
        self.positions: dict[int, int] = {}
        self.records = 0

    # -- reading ------------------------------------------------------------------------------
    def start_at(self, since_ms: int, floors: dict[int, int] | None = None) -> None:
        """Where a restarted auditor begins: the first record appended at `since_ms`, or the
        partition's floor (a cut's unfolded records) when that is earlier."""
        c = kafka_client.consumer(self.s, group_id=None)
        try:
            parts = kafka_client.partitions(c, self.topic, wait_s=1.0)
            tps = [TopicPartition(self.topic, p) for p in parts]
            if not tps:
                return
            found = c.offsets_for_times({tp: since_ms for tp in tps})
            ends = c.end_offsets(tps)
            for tp in tps:
                at = found.get(tp)
                o = at.offset if at is not None else ends[tp]
                if floors and tp.partition in floors:
                    o = min(o, floors[tp.partition])
                self.positions[tp.partition] = o
        finally:
            c.close()

    def _consumer(self):
        return kafka_client.consumer(self.s, group_id=None, isolation_level="read_committed",
                                     max_poll_records=10_000, fetch_max_bytes=64 * 1024 * 1024,
                                     max_partition_fetch_bytes=16 * 1024 * 1024)

    def _scan(self, c, ranges: dict[int, tuple[int, int]], on_record) -> dict[int, int]:
        """Hand `on_record` every record of partition p with offset in ranges[p] = [lo, hi), in
        order; stop when every partition is past hi or the broker gave nothing for 10 s. Returns
        where each partition's reading stood (at most hi; past control records and aborted
        transactions too)."""
        tps = {p: TopicPartition(self.topic, p) for p in ranges}
        c.assign(list(tps.values()))
        for p, tp in tps.items():
            c.seek(tp, ranges[p][0])
        idle = 0
        while idle < 20 and any(c.position(tps[p]) < hi for p, (_, hi) in ranges.items()):
            batch = c.poll(timeout_ms=500)
            idle = 0 if batch else idle + 1
            for tp, records in batch.items():
                lo, hi = ranges[tp.partition]
                for r in records:
                    if lo <= r.offset < hi:
                        on_record(r)
        return {p: min(c.position(tp), ranges[p][1]) for p, tp in tps.items()}

    def read(self) -> "TopicIndex":
        """Read from where the last read stopped up to the end offsets taken now."""
        c = self._consumer()
        try:
            tps = [TopicPartition(self.topic, p) for p in kafka_client.partitions(c, self.topic, wait_s=1.0)]
            if not tps:
                return self
            ends = c.end_offsets(tps)
            ranges = {tp.partition: (self.positions.get(tp.partition, 0), ends[tp]) for tp in tps
                      if self.positions.get(tp.partition, 0) < ends[tp]}
            if not ranges:
                return self
            for p, (lo, _) in ranges.items():
                self.ids_from.setdefault(p, lo)
            for p, at in self._scan(c, ranges, self._add).items():
                self.positions[p] = max(self.positions.get(p, 0), at)
            return self
        finally:
            c.close()
            self._flush()

    def _add(self, r) -> None:
        self.records += 1
        if self.reject is not None and self.reject(r.value, r.timestamp, getattr(r, "headers", None) or ()):
            self._index(r, INVALID, False, True)
            return
        try:
            doc = json.loads(r.value)
        except (ValueError, TypeError, RecursionError):  # not a decision: counted in records, not in ids
            return
        if not isinstance(doc, dict) or not isinstance(doc.get("txn_id"), str):
            return
        bad = bool(self.on_doc(doc)) if self.on_doc else False
        self._index(r, code(doc["txn_id"]), bool(doc.get("is_fraud")), bad)

    def _index(self, r, c: int, is_fraud: bool, bad: bool) -> None:
        o, cs, f, b, t = self._new.setdefault(r.partition, ([], [], [], [], []))
        o.append(r.offset)
        cs.append(c)
        f.append(is_fraud)
        b.append(bad)
        t.append(r.timestamp)

    def _flush(self) -> None:
        """The records of the last read, appended to the partitions' arrays."""
        for p, (o, c, f, b, t) in self._new.items():
            if not o:
                continue
            new = Partition(np.asarray(o, np.int64), np.asarray(c, np.int64), np.asarray(f, bool),
                            np.asarray(t, np.int64), np.asarray(b, bool))
            have = self._parts.get(p)
            self._parts[p] = new if have is None else have.append(new)
        self._new = {}

    # -- what is kept -------------------------------------------------------------------------
    def partitions(self) -> dict[int, Partition]:
        return self._parts

    def held(self) -> int:
        """Records held in memory."""
        return sum(len(p.offsets) for p in self._parts.values())

    def trim(self, before_ms: int, floors: dict[int, int] | None = None) -> None:
        """Forget the records appended before `before_ms`, but none at or beyond a partition's
        floor (records some cut has not folded yet)."""
        for p, part in list(self._parts.items()):
            cut = part.first_at(before_ms)
            if floors and p in floors:
                cut = min(cut, int(np.searchsorted(part.offsets, floors[p], "left")))
            if cut:
                self._parts[p] = part.tail(cut)

    def take_ids(self, ends: dict[int, int]) -> list[tuple[int, str]]:
        """The (offset, txn_id) of each partition p from where the last take stopped up to
        `ends[p]`, read again from Kafka (read_committed, as the index was)."""
        todo = {p: (self.ids_from.get(p, end), end) for p, end in ends.items() if self.ids_from.get(p, end) < end}
        out: list[tuple[int, str]] = []
        if not todo:
            return out

        def collect(r) -> None:
            txn_id = _txn_id(r.value)
            if txn_id is not None:
                out.append((r.offset, txn_id))

        c = self._consumer()
        try:
            reached = self._scan(c, todo, collect)
        finally:
            c.close()
        short = {p: (reached[p], hi) for p, (_, hi) in todo.items() if reached[p] < hi}
        if short:  # the broker stopped answering: no fold this time (its records would count as lost)
            raise TimeoutError(f"{self.topic} gave no records for 10 s while reading its txn_ids again, at "
                               + ", ".join(f"partition {p} offset {at} of {hi}" for p, (at, hi) in short.items()))
        for p, (_, end) in todo.items():
            self.ids_from[p] = end
        return out


def _txn_id(value: bytes | None) -> str | None:
    try:
        doc = json.loads(value)
    except (ValueError, TypeError, RecursionError):
        return None
    return doc["txn_id"] if isinstance(doc, dict) and isinstance(doc.get("txn_id"), str) else None


class Lookup:
    """Codes -> flags, for the records one index holds (sorted once per audit)."""

    def __init__(self, index: TopicIndex):
        parts = list(index.partitions().values())
        cat = (lambda get, dt: np.concatenate([get(p) for p in parts]) if parts else np.zeros(0, dt))
        codes = cat(lambda p: p.codes, np.int64)
        order = np.argsort(codes, kind="stable")
        self.codes = codes[order]
        self.fraud = cat(lambda p: p.fraud, bool)[order]
        self.bad = cat(lambda p: p.bad if p.bad is not None else np.zeros(len(p.codes), bool), bool)[order]

    def find(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(found, fraud, bad) masks for each of `codes` (fraud and bad: False where not found)."""
        if not len(self.codes):
            none = np.zeros(len(codes), bool)
            return none, none, none
        i = np.clip(np.searchsorted(self.codes, codes), 0, len(self.codes) - 1)
        found = self.codes[i] == codes
        return found, found & self.fraud[i], found & self.bad[i]
