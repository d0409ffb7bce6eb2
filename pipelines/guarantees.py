"""The usage job's sink rules, one per delivery guarantee, as plain functions over the store.

Spark aggregates each micro-batch in the JVM (count, sum(is_fraud)); the driver hands the two
numbers to one of these functions from foreachBatch. What tells the guarantees apart is here:

- at-most-once: one attempt; when the sink rejects the write the batch is dropped (recorded in
  `usage_dropped_batches`, never retried). Its checkpoint is thrown away at every start.
- at-least-once: the increment is applied before Spark commits the batch; a failed write raises,
  so the batch is not committed and is replayed, which after a crash counts it twice.
- exactly-once: the increment and the batch id land in ONE SQLite transaction; a batch id already
  in `usage_applied_batches` is skipped, so a replay has no second effect.

Every write transaction checks the job's fencing epoch, so a zombie instance cannot write.
No Spark import here: these are unit-tested on a real SQLite file alone.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import sqlite_utils

from pipelines import fencing
from pipelines.commands import now_ms
from pipelines.store import transaction

JOB = "usage"
AT_MOST_ONCE, AT_LEAST_ONCE, EXACTLY_ONCE = "at-most-once", "at-least-once", "exactly-once"


class SinkDown(RuntimeError):
    """The sink rejects writes right now (the `sink-down` fault)."""


@dataclass
class SinkGate:
    """Whether the sink accepts writes: closed for N seconds by the `sink-down` fault.

    Shared by every query's sink in the process; `clock` is injectable so tests need no sleeps.
    """
    clock: callable = field(default=time.monotonic)
    down_until: float = 0.0

    def take_down(self, seconds: float) -> None:
        self.down_until = max(self.down_until, self.clock() + seconds)

    def is_down(self) -> bool:
        return self.clock() < self.down_until

    def check(self) -> None:
        if self.is_down():
            raise SinkDown(f"the usage sink rejects writes for {self.down_until - self.clock():.1f} s more")


@dataclass(frozen=True)
class BatchResult:
    """What one micro-batch adds: computed in the JVM, small enough to carry to the driver."""
    batch_id: int
    processed: int
    fraud: int


def _increment(conn, guarantee: str, processed: int, fraud: int) -> None:
    conn.execute(
        "INSERT INTO usage_counts (guarantee, processed, fraud, updated_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(guarantee) DO UPDATE SET processed = processed + excluded.processed, "
        "fraud = fraud + excluded.fraud, updated_at = excluded.updated_at",
        (guarantee, processed, fraud, now_ms()))


def write_at_most_once(db: sqlite_utils.Database, result: BatchResult, epoch: int,
                       gate: SinkGate | None = None, reason: str | None = None) -> bool:
    """Apply the batch once if the sink takes it; otherwise drop it. Returns whether it landed.

    `reason` set means the batch already failed upstream (e.g. a task failure): it is dropped.
    Fencing errors are not write failures: they propagate, the instance must stop.
    """
    try:
        if reason:
            raise SinkDown(reason)
        if gate:
            gate.check()
        with transaction(db) as conn:
            fencing.check(conn, JOB, epoch, f"{AT_MOST_ONCE} batch {result.batch_id}")
            _increment(conn, AT_MOST_ONCE, result.processed, result.fraud)
        return True
    except fencing.FencedError:
        raise
    except Exception as exc:  # noqa: BLE001 - at-most-once: any failed write is dropped, by design
        record_drop(db, AT_MOST_ONCE, result, str(exc))
        return False


def record_drop(db: sqlite_utils.Database, guarantee: str, result: BatchResult, reason: str) -> None:
    """Lost, but never silently: the dashboard and the audit see what was dropped."""
    try:
        db.conn.execute("INSERT INTO usage_dropped_batches (guarantee, batch_id, processed, fraud, reason, ts) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        (guarantee, result.batch_id, result.processed, result.fraud, reason[:500], now_ms()))
    except Exception:  # noqa: BLE001 - the drop itself must not fail the at-most-once batch
        pass


def write_at_least_once(db: sqlite_utils.Database, result: BatchResult, epoch: int,
                        gate: SinkGate | None = None) -> None:
    """Apply the increment now, before Spark commits; any failure raises (the batch is replayed)."""
    if gate:
        gate.check()
    with transaction(db) as conn:
        fencing.check(conn, JOB, epoch, f"{AT_LEAST_ONCE} batch {result.batch_id}")
        _increment(conn, AT_LEAST_ONCE, result.processed, result.fraud)


def write_exactly_once(db: sqlite_utils.Database, result: BatchResult, epoch: int,
                       gate: SinkGate | None = None) -> bool:
    """Apply the increment and record the batch id in one transaction; skip a batch already applied.

    Returns False when the batch id was applied before (a replay after a crash).
    """
    if gate:
        gate.check()
    with transaction(db) as conn:
        fencing.check(conn, JOB, epoch, f"{EXACTLY_ONCE} batch {result.batch_id}")
        if conn.execute("SELECT 1 FROM usage_applied_batches WHERE guarantee = ? AND batch_id = ?",
                        (EXACTLY_ONCE, result.batch_id)).fetchone():
            return False
        _increment(conn, EXACTLY_ONCE, result.processed, result.fraud)
        conn.execute("INSERT INTO usage_applied_batches (guarantee, batch_id, processed, fraud, epoch, applied_at) "
                     "VALUES (?, ?, ?, ?, ?, ?)",
                     (EXACTLY_ONCE, result.batch_id, result.processed, result.fraud, epoch, now_ms()))
    return True


def retry_until_written(write, *, stop=lambda: False, sleep=time.sleep, first_delay: float = 0.1,
                        max_delay: float = 2.0):
    """Retry `write()` with exponential backoff while the sink is down (at-least/exactly-once).

    Spark does not commit the batch while this waits, so a crash during the outage replays it.
    Other errors propagate: the batch fails and the query is restarted from its checkpoint.
    """
    delay = first_delay
    while True:
        try:
            return write()
        except SinkDown:
            if stop():
                raise
            sleep(delay)
            delay = min(max_delay, delay * 2)


def counts(db: sqlite_utils.Database) -> dict[str, dict[str, int]]:
    """{guarantee: {"processed": n, "fraud": m}} as the sinks hold them now."""
    return {r["guarantee"]: {"processed": r["processed"] or 0, "fraud": r["fraud"] or 0}
            for r in db.query("SELECT guarantee, processed, fraud FROM usage_counts")}


def dropped(db: sqlite_utils.Database, guarantee: str = AT_MOST_ONCE) -> dict[str, int]:
    row = db.execute("SELECT COUNT(*), COALESCE(SUM(processed), 0), COALESCE(SUM(fraud), 0) "
                     "FROM usage_dropped_batches WHERE guarantee = ?", [guarantee]).fetchone()
    return {"batches": row[0], "processed": row[1], "fraud": row[2]}


WRITERS = {AT_MOST_ONCE: write_at_most_once, AT_LEAST_ONCE: write_at_least_once,
           EXACTLY_ONCE: write_exactly_once}
