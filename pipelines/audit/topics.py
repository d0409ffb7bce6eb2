"""Topics read for the audit, incrementally and read_committed: each record's offset, txn_id,
is_fraud and append time, kept per partition in arrays the cut can slice by offset."""
from __future__ import annotations

import json

import numpy as np

from infra import kafka_client
from pipelines.audit.cut import Partition


class Ids:
    """txn_id <-> small int codes, shared by every topic of one auditor."""

    def __init__(self):
        self.codes: dict[str, int] = {}

    def code(self, txn_id: str) -> int:
        c = self.codes.get(txn_id)
        if c is None:
            c = self.codes[txn_id] = len(self.codes)
        return c


# The code of a record the input contract rejects (a dead letter): indexed, so offsets and lag
# stay whole, but never a txn_id of the truth.
INVALID = -1


class TopicIndex:
    def __init__(self, s, topic: str, ids: Ids, on_doc=None, reject=None):
        """`reject(value, timestamp)`: whether a record breaks the input contract (it is indexed
        as INVALID, whatever txn_id it carries)."""
        self.s, self.topic, self.ids, self.on_doc, self.reject = s, topic, ids, on_doc, reject
        self._cols: dict[int, tuple[list, list, list, list]] = {}
        self._arrays: dict[int, Partition] = {}
        self.positions: dict[int, int] = {}
        self.records = 0

    def partitions(self) -> dict[int, Partition]:
        for p, (o, c, f, t) in self._cols.items():
            have = self._arrays.get(p)
            if have is None or len(have.offsets) != len(o):
                self._arrays[p] = Partition(np.asarray(o, dtype=np.int64), np.asarray(c, dtype=np.int64),
                                            np.asarray(f, dtype=bool), np.asarray(t, dtype=np.int64))
        return self._arrays

    def read(self) -> "TopicIndex":
        """Read from where the last read stopped up to the end offsets taken now."""
        from kafka import TopicPartition

        c = kafka_client.consumer(self.s, group_id=None, isolation_level="read_committed",
                                  max_poll_records=10_000, fetch_max_bytes=64 * 1024 * 1024,
                                  max_partition_fetch_bytes=16 * 1024 * 1024)
        try:
            tps = [TopicPartition(self.topic, p) for p in kafka_client.partitions(c, self.topic, wait_s=1.0)]
            if not tps:
                return self
            ends = c.end_offsets(tps)
            todo = [tp for tp in tps if self.positions.get(tp.partition, 0) < ends[tp]]
            if not todo:
                return self
            c.assign(todo)
            for tp in todo:
                c.seek(tp, self.positions.get(tp.partition, 0))
            idle = 0
            while idle < 20 and any(c.position(tp) < ends[tp] for tp in todo):
                batch = c.poll(timeout_ms=500)
                idle = 0 if batch else idle + 1
                for tp, records in batch.items():
                    for r in records:
                        if self.positions.get(tp.partition, 0) <= r.offset < ends[tp]:
                            self._add(r)
                            self.positions[tp.partition] = r.offset + 1
            for tp in todo:  # past control records and aborted transactions too
                self.positions[tp.partition] = max(self.positions.get(tp.partition, 0),
                                                   min(c.position(tp), ends[tp]))
            return self
        finally:
            c.close()

    def _add(self, r) -> None:
        self.records += 1
        if self.reject is not None and self.reject(r.value, r.timestamp):
            self._index(r, INVALID, False)
            return
        try:
            doc = json.loads(r.value)
        except (ValueError, TypeError, RecursionError):  # not a decision: counted in records, not in ids
            return
        if not isinstance(doc, dict) or not isinstance(doc.get("txn_id"), str):
            return
        if self.on_doc:
            self.on_doc(doc)
        self._index(r, self.ids.code(doc["txn_id"]), bool(doc.get("is_fraud")))

    def _index(self, r, code: int, is_fraud: bool) -> None:
        o, c, f, t = self._cols.setdefault(r.partition, ([], [], [], []))
        o.append(r.offset)
        c.append(code)
        f.append(is_fraud)
        t.append(r.timestamp)
