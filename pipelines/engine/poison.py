"""The poison-batch rule: when one batch keeps failing the same way, its records are the problem.

A failed query is restarted from its checkpoint and replays the same batch (the same offsets,
from the offset log), so a record the job's code cannot process fails it on every restart: a
crash loop. The rule: `POISON_BATCH_FAILURES` failures in a row of one query, on the same batch
(the same batch id and Kafka range) with the same error signature (exception class and first
message line), make the batch poison. The job then looks for the records that fail on their
own (`isolate`: the batch's records through the job's per-record logic, in halves down to single
records), dead-letters those with their own exception as reason, and restarts the query with
them excluded (`exclusion_sql`, a filter right after the Kafka source). A batch whose records
all pass on their own failed for another reason (the broker, the store, the disk): nothing is
dead-lettered — good transactions must not be taken out of the decisions because the broker is
down — and the restart policy (`pipelines.restarts`) goes on.

No Spark import: the job and the tests share this file.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

REASON_PREFIX = "poison batch: "
MAX_ERROR_CHARS = 300


def signature(exc: BaseException) -> str:
    """`<ExceptionClass>: <first line of its message>`: what "fails the same way" compares."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:MAX_ERROR_CHARS]


def reason(exc: BaseException) -> str:
    """The dead letter's reason for a record that failed on its own."""
    return REASON_PREFIX + signature(exc)


@dataclass(frozen=True)
class Failure:
    """One failure of a query: on which batch (id and Kafka range) and how."""
    query: str
    batch_id: int | None          # None: no batch was running (the query failed to start or plan)
    start: dict                   # {topic: {partition: offset}}, inclusive
    end: dict                     # exclusive
    error: str                    # `signature`

    @property
    def same_as(self) -> tuple:
        return (self.query, self.batch_id, json.dumps(self.start, sort_keys=True),
                json.dumps(self.end, sort_keys=True), self.error)


class Streaks:
    """Identical failures in a row, per query (pure bookkeeping)."""

    def __init__(self, threshold: int):
        if threshold < 1:
            raise ValueError(f"POISON_BATCH_FAILURES must be at least 1, not {threshold}")
        self.threshold = threshold
        self._last: dict[str, tuple[tuple, int]] = {}

    def observe(self, f: Failure) -> int:
        """Record a failure; how many identical ones in a row it makes (1: a new kind)."""
        previous = self._last.get(f.query)
        n = previous[1] + 1 if previous and previous[0] == f.same_as else 1
        self._last[f.query] = (f.same_as, n)
        return n

    def poison(self, f: Failure, n: int) -> bool:
        """Whether `n` identical failures make `f`'s batch poison: only a batch with a Kafka range
        (a failure before any batch has no records to blame)."""
        holds_records = any(end > f.start.get(topic, {}).get(p, 0)
                            for topic, parts in f.end.items() for p, end in parts.items())
        return n >= self.threshold and f.batch_id is not None and holds_records

    def clear(self, query: str) -> None:
        """After a quarantine: the query's next failure starts a new streak."""
        self._last.pop(query, None)


def isolate(items: Sequence, check: Callable[[list], object]) -> list[tuple[object, BaseException]]:
    """The items that fail `check` on their own, each with its exception, found by halves.

    `check(items)` runs the job's per-record logic on a list and raises when any fails. One
    poison record among n costs about 2·log2(n) calls; a batch that passes whole returns [] at
    once. Items that fail only together (never alone) are not returned: nothing to blame.
    """
    found: list[tuple[object, BaseException]] = []
    pending = [list(items)]
    while pending:
        part = pending.pop()
        if not part:
            continue
        try:
            check(part)
            continue
        except Exception as exc:  # noqa: BLE001 - any failure is what we look for
            if len(part) == 1:
                found.append((part[0], exc))
                continue
        mid = len(part) // 2
        pending += [part[mid:], part[:mid]]   # the first half is looked at first
    return found


def exclusion_sql(records: Iterable[tuple[int, int]]) -> str | None:
    """A Spark SQL condition keeping every Kafka record except these (partition, offset) pairs;
    None when there is nothing to exclude. Applied right after the Kafka source, before anything
    stateful, so changing it between two runs of a query is allowed."""
    by_partition: dict[int, set[int]] = {}
    for p, o in records:
        by_partition.setdefault(int(p), set()).add(int(o))
    if not by_partition:
        return None
    terms = [f"(partition = {p} AND offset IN ({', '.join(str(o) for o in sorted(offs))}))"
             for p, offs in sorted(by_partition.items())]
    return f"NOT ({' OR '.join(terms)})"


def still_ahead(records: Iterable[tuple[int, int]], committed: dict[int, int]) -> list[tuple[int, int]]:
    """The records a query can still read: at or beyond its committed offsets (a record below
    them is never read again, so its exclusion can go)."""
    return [(p, o) for p, o in records if o >= committed.get(int(p), 0)]


class Recorder:
    """The last failure each query's foreachBatch raised, with its batch id and exception.

    Spark wraps an error raised in foreachBatch in a StreamingQueryException whose text is the
    Py4J trace; the handler's own exception (its class and message) is the honest signature, so
    the handler is wrapped (`guard`) and the runner reads it here.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._last: dict[str, tuple[int, BaseException]] = {}

    def guard(self, query: str, handler: Callable) -> Callable:
        def handle(df, batch_id):
            try:
                return handler(df, batch_id)
            except BaseException as exc:
                with self._lock:
                    self._last[query] = (int(batch_id), exc)
                raise
        return handle

    def take(self, query: str) -> tuple[int, BaseException] | None:
        with self._lock:
            return self._last.pop(query, None)
