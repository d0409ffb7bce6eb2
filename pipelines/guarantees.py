"""The three delivery guarantees as policy objects, resolved once per query.

A `Guarantee` says everything that tells the guarantees apart, the way Quix Streams resolves its
processing_guarantee once: whether the checkpoint is kept across restarts, where a fresh query
starts reading, whether input is deduplicated by txn_id, and what the sink does with a batch
(`write`) and with a failure (drop it, or fail the batch so Spark replays it). Nothing else in
the code branches on a guarantee's name.

- at-most-once: its checkpoint is thrown away at every start, it starts from the latest offsets,
  and a failed write drops the batch (recorded in the sink ledger as `dropped`, never retried).
- at-least-once: durable checkpoint, starts from the earliest offsets; the increment is applied
  before Spark commits the batch; a failed write fails the batch, which is replayed, and a replay
  after a crash counts its batch twice.
- exactly-once: durable checkpoint, input deduplicated by txn_id within DEDUPE_SECONDS; the
  increment and the batch's ledger record land in ONE SQLite transaction, and a batch already
  applied under this checkpoint is skipped, so a replay has no second effect.

The fraud job's real-time path has a guarantee of its own (`RealtimeGuarantee`, resolved once
from `--guarantee` / FRAUD_RT_GUARANTEE): its stateful companion decides every transaction exactly
once, so the real-time path's choice is only where a restart reads from and whether it sends
again the decisions it may have sent before it stopped.

- at-most-once: a restart reads from the offsets its seed covers and sends a decision only for
  the transactions that reach Kafka after the start: what came while it was down is skipped.
- at-least-once: a restart reads back to its own last committed offsets (or the seed's, if
  earlier) and sends those decisions again: nothing it had not committed is skipped.

Every write is fenced (`controlplane.fencing.fenced_write`): a zombie instance cannot write.
No Spark import here: the sink rules are unit-tested on a real SQLite file alone.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import sqlite_utils

from controlplane import fencing, ledger
from controlplane.clock import now_ms
from controlplane.store import transaction
from infra.contracts import GUARANTEES, RT_GUARANTEES

JOB = "usage"
# how to bring a usage sink and its checkpoint back together (said when either is refused)
RESET_FIX = ("run `make clean`, or start the job with --reset-sink to clear this sink and its checkpoint "
             "together")
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


def _increment(conn, guarantee: str, processed: int, fraud: int) -> None:
    conn.execute(
        "INSERT INTO usage_counts (guarantee, processed, fraud, updated_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(guarantee) DO UPDATE SET processed = processed + excluded.processed, "
        "fraud = fraud + excluded.fraud, updated_at = excluded.updated_at",
        (guarantee, processed, fraud, now_ms()))


def retry_until_written(write, *, stop=lambda: False, sleep=time.sleep, first_delay: float = 0.1,
                        max_delay: float = 2.0):
    """Retry `write()` with exponential backoff while the sink is down.

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


@dataclass(frozen=True)
class Guarantee:
    name: str
    keeps_checkpoint: bool     # False: the checkpoint is deleted at every start
    starting_offsets: str      # where a fresh checkpoint starts reading
    dedupes_input: bool        # each txn_id counted once (pipelines.usage.dedupe, per Kafka partition)
    drops_failed_batches: bool  # True: a failed write or batch is dropped; False: the batch fails
    skips_applied: bool        # True: a batch id already applied under this checkpoint is skipped
    sentence: str

    @property
    def query(self) -> str:
        return f"{JOB}-{self.name}"

    def write(self, db: sqlite_utils.Database, batch: ledger.Batch, epoch: int,
              gate: SinkGate | None = None, stop=lambda: False) -> str:
        """Apply one batch under this guarantee; returns the ledger outcome.

        FencedError always propagates: a superseded instance must stop, not drop or retry; so
        does ledger.ReusedBatch: a checkpoint whose batch ids name other ranges must not write.
        """
        if not self.drops_failed_batches:
            return retry_until_written(lambda: self._write_once(db, batch, epoch, gate), stop=stop)
        try:
            return self._write_once(db, batch, epoch, gate)
        except (fencing.FencedError, ledger.ReusedBatch):
            raise
        except Exception as exc:  # noqa: BLE001 - at-most-once: any failed write is dropped, by design
            self.drop(db, batch, epoch, str(exc))
            return ledger.DROPPED

    def failed(self, db: sqlite_utils.Database, batch: ledger.Batch, epoch: int, exc: BaseException) -> None:
        """The batch failed before reaching the sink (a task failure): drop it, or fail it again."""
        if not self.drops_failed_batches:
            raise exc
        self.drop(db, batch, epoch, str(exc))

    def drop(self, db: sqlite_utils.Database, batch: ledger.Batch, epoch: int, reason: str) -> None:
        """Lost, but never silently: the ledger says which offsets were not counted, and why."""
        try:
            with transaction(db) as conn:
                ledger.record(conn, batch, ledger.DROPPED, epoch, reason)
        except Exception:  # noqa: BLE001 - recording the drop must not fail the at-most-once batch
            pass

    def _write_once(self, db, batch: ledger.Batch, epoch: int, gate: SinkGate | None) -> str:
        if gate:
            gate.check()
        with fencing.fenced_write(db, JOB, epoch, f"{self.name} batch {batch.batch_id}") as conn:
            if self.skips_applied:
                if not ledger.apply_once(conn, batch, epoch, RESET_FIX):
                    return ledger.SKIPPED
            else:
                ledger.record(conn, batch, ledger.APPLIED, epoch)
            _increment(conn, self.name, batch.processed, batch.fraud)
        return ledger.APPLIED


POLICIES: dict[str, Guarantee] = {g.name: g for g in (
    Guarantee(AT_MOST_ONCE, keeps_checkpoint=False, starting_offsets="latest", dedupes_input=False,
              drops_failed_batches=True, skips_applied=False,
              sentence="no checkpoint kept across restarts, restarts from the latest offsets; "
                       "failed writes are dropped, never retried"),
    Guarantee(AT_LEAST_ONCE, keeps_checkpoint=True, starting_offsets="earliest", dedupes_input=False,
              drops_failed_batches=False, skips_applied=False,
              sentence="durable checkpoint; increments applied before Spark commits the batch, a failure "
                       "fails the batch and it is replayed"),
    Guarantee(EXACTLY_ONCE, keeps_checkpoint=True, starting_offsets="earliest", dedupes_input=True,
              drops_failed_batches=False, skips_applied=True,
              sentence="durable checkpoint; results and batch id in one SQLite transaction, a batch "
                       "already applied is skipped; input deduplicated by txn_id within DEDUPE_SECONDS"),
)}
assert tuple(POLICIES) == GUARANTEES, "one policy per guarantee of the contract"


def _named(policies: dict, name: str, what: str):
    try:
        return policies[name]
    except KeyError:
        raise ValueError(f"There is no {what} {name!r}; choose from {', '.join(policies)}.") from None


def policy(name: str) -> Guarantee:
    return _named(POLICIES, name, "guarantee")


@dataclass(frozen=True)
class RealtimeGuarantee:
    """The fraud job's real-time path's guarantee: what its (re)start does. The path asks it
    where to read from and from when to send decisions, and never compares its name."""
    name: str
    resends: bool   # True: a restart replays from its own committed offsets, sending those decisions again
    sentence: str

    def __str__(self) -> str:
        return self.name

    def resume_from(self, committed: dict | None) -> dict | None:
        """Where a restart reads from besides the seed's offsets: the path's own last committed
        offsets ({partition: offset}, from its checkpoint) when it resends, else none."""
        return committed if self.resends else None

    def sends_from(self, started_at_ms: int) -> int | None:
        """The append time from which decisions are sent: None (every transaction read) when it
        resends, else the start (what arrived while it was down is folded, not decided)."""
        return None if self.resends else started_at_ms


RT_POLICIES: dict[str, RealtimeGuarantee] = {g.name: g for g in (
    RealtimeGuarantee(AT_MOST_ONCE, resends=False,
                      sentence="never replays: a restart decides only what reaches Kafka after it, so what "
                               "arrives while it restarts is skipped (the stateful path still decides it)"),
    RealtimeGuarantee(AT_LEAST_ONCE, resends=True,
                      sentence="replays: a restart reads back to its own last committed offsets, so "
                               "decisions sent before the stop may be sent again"),
)}
assert tuple(RT_POLICIES) == RT_GUARANTEES, "one policy per real-time guarantee of the contract"


def rt_policy(name: str) -> RealtimeGuarantee:
    """The real-time path's policy for `name`; ValueError naming the choices for any other."""
    return _named(RT_POLICIES, name, "real-time guarantee")


def counts(db: sqlite_utils.Database) -> dict[str, dict[str, int]]:
    """{guarantee: {"processed": n, "fraud": m}} as the sinks hold them now."""
    return {r["guarantee"]: {"processed": r["processed"] or 0, "fraud": r["fraud"] or 0}
            for r in db.query("SELECT guarantee, processed, fraud FROM usage_counts")}


def dropped(db: sqlite_utils.Database, guarantee: str = AT_MOST_ONCE) -> dict[str, int]:
    row = db.execute("SELECT COUNT(*), COALESCE(SUM(processed), 0), COALESCE(SUM(fraud), 0) "
                     "FROM sink_batches WHERE sink = ? AND outcome = ?",
                     [policy(guarantee).query, ledger.DROPPED]).fetchone()
    return {"batches": row[0], "processed": row[1], "fraud": row[2]}
