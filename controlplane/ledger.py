"""The sink ledger: which batch each store sink applied, skipped or dropped (table `sink_batches`).

Every store sink (the usage guarantees, the windows, the fraud decisions) records the batch it
was handed inside the same fenced SQLite transaction as the batch's effect, so the ledger and
the effect can never disagree. A batch is named by the Spark checkpoint it belongs to (the
query id in the checkpoint's `metadata` file) and its batch id, and carries its Kafka offset
range from Spark's offset log: the auditor checks each sink against exactly the input records its
applications covered, and tells the query's own replays (the same batch applied twice) from
duplicates in the input.

A replay is skipped only when it is the same batch: the same batch id of the same checkpoint over
the same Kafka range. A checkpoint restored from a backup, or with part of its offset and commit
logs deleted, plans its next batch ids again over other ranges; such a batch is refused
(`ReusedBatch`, one sentence) instead of being skipped as if its records were applied.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from controlplane.clock import now_ms

APPLIED, SKIPPED, DROPPED = "applied", "skipped", "dropped"


@dataclass(frozen=True)
class Batch:
    """One micro-batch as a sink sees it: where it comes from and what it adds."""
    sink: str
    checkpoint_id: str
    batch_id: int
    processed: int = 0
    fraud: int = 0
    start_offsets: dict = field(default_factory=dict)   # {topic: {partition: offset}}, inclusive
    end_offsets: dict = field(default_factory=dict)     # exclusive


def was_applied(conn, batch: Batch) -> bool:
    return conn.execute("SELECT 1 FROM sink_batches WHERE sink = ? AND checkpoint_id = ? AND batch_id = ? "
                        "AND outcome = ? LIMIT 1",
                        (batch.sink, batch.checkpoint_id, batch.batch_id, APPLIED)).fetchone() is not None


def record(conn, batch: Batch, outcome: str, epoch: int, reason: str | None = None) -> None:
    conn.execute("INSERT INTO sink_batches (sink, checkpoint_id, batch_id, outcome, processed, fraud, "
                 "start_offsets, end_offsets, reason, epoch, ts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (batch.sink, batch.checkpoint_id, batch.batch_id, outcome, batch.processed, batch.fraud,
                  json.dumps(batch.start_offsets), json.dumps(batch.end_offsets),
                  (reason or "")[:500] or None, epoch, now_ms()))


FIX = "run `make clean` to clear the store and the checkpoints together"


def _offsets(value) -> dict:
    """{topic: {partition (int): offset (int)}} from a Batch's dict or a stored JSON text."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    return {str(t): {int(p): int(o) for p, o in parts.items()} for t, parts in value.items() if isinstance(parts, dict)}


def _differ(a: dict, b: dict) -> bool:
    """Two offset maps that are both known and not the same (an unknown side proves nothing)."""
    return bool(a) and bool(b) and a != b


def describe_range(start, end) -> str:
    """`decisions 0:120-180, 1:40-40`: a batch's Kafka range as a person reads it."""
    start, end = _offsets(start), _offsets(end)
    out = []
    for topic in sorted(set(start) | set(end)):
        parts = sorted(set(start.get(topic, {})) | set(end.get(topic, {})))
        out.append(f"{topic} " + ", ".join(f"{p}:{start.get(topic, {}).get(p, '?')}-{end.get(topic, {}).get(p, '?')}"
                                           for p in parts))
    return "; ".join(out) or "no recorded offsets"


class ReusedBatch(RuntimeError):
    """The checkpoint hands a batch id the sink applied before, over another Kafka range."""


def applied_range(conn, batch: Batch) -> tuple[dict, dict] | None:
    """(start, end) offsets this sink recorded when it applied `batch`'s id under its checkpoint."""
    row = conn.execute("SELECT start_offsets, end_offsets FROM sink_batches WHERE sink = ? AND checkpoint_id = ? "
                       "AND batch_id = ? AND outcome = ? ORDER BY id LIMIT 1",
                       (batch.sink, batch.checkpoint_id, batch.batch_id, APPLIED)).fetchone()
    return None if row is None else (_offsets(row[0]), _offsets(row[1]))


def apply_once(conn, batch: Batch, epoch: int, fix: str = FIX) -> bool:
    """Inside the sink's transaction: False (and a `skipped` record) when this batch was applied
    before, else an `applied` record and True; the caller then applies the batch's effect.

    Raises ReusedBatch (nothing recorded; the caller's transaction rolls back) when this batch id
    was applied under this checkpoint over another Kafka range: skipping it would lose its records."""
    start, end = _offsets(batch.start_offsets), _offsets(batch.end_offsets)
    applied = applied_range(conn, batch)
    if applied is None:
        # a query runs its batches in order and replays only its newest: a new batch id below one
        # already applied means the checkpoint went back in its history
        newest = conn.execute("SELECT max(batch_id) FROM sink_batches WHERE sink = ? AND checkpoint_id = ? "
                              "AND outcome = ?", (batch.sink, batch.checkpoint_id, APPLIED)).fetchone()[0]
        if newest is not None and newest > batch.batch_id:
            raise ReusedBatch(
                f"{batch.sink}: checkpoint {batch.checkpoint_id} hands batch {batch.batch_id} "
                f"({describe_range(start, end)}), but the store applied its batches up to {newest} already, so the "
                f"checkpoint was restored from a backup or lost part of its offset and commit logs and its batch ids "
                f"no longer name what the store holds; {fix}.")
        record(conn, batch, APPLIED, epoch)
        return True
    if _differ(applied[1], end) or _differ(applied[0], start):
        raise ReusedBatch(
            f"{batch.sink}: batch {batch.batch_id} of checkpoint {batch.checkpoint_id} now covers "
            f"{describe_range(start, end)}, but the store applied batch {batch.batch_id} of that checkpoint over "
            f"{describe_range(*applied)}, so the checkpoint was restored from a backup or lost part of its offset "
            f"and commit logs and its batch ids no longer name what the store holds; {fix}.")
    record(conn, batch, SKIPPED, epoch, "replay of a batch already applied")
    return False


def foreign_checkpoints(db, sink: str, checkpoint_id: str) -> list[str]:
    """Checkpoint ids other than `checkpoint_id` that this sink holds applied batches of."""
    return [r[0] for r in db.execute("SELECT DISTINCT checkpoint_id FROM sink_batches WHERE sink = ? "
                                     "AND checkpoint_id != ? AND outcome = ?",
                                     [sink, checkpoint_id, APPLIED]).fetchall()]


def batches(db, sink: str) -> list[dict]:
    return [dict(r) for r in db.query("SELECT * FROM sink_batches WHERE sink = ? ORDER BY id", [sink])]


class ForeignCheckpoint(RuntimeError):
    """The sink holds batches of another checkpoint: batch ids would be skipped or counted twice."""


def check_bound(db, sink: str, checkpoint_id: str | None, fix: str) -> None:
    """Refuse to run a durable sink on a checkpoint its store rows do not belong to.

    `checkpoint_id` None means a fresh checkpoint: then the sink must hold nothing yet. Batch ids
    restart at 0 with a new checkpoint, so without this a kept store would skip the new batches
    it thinks it applied, or count the input twice.
    """
    if checkpoint_id is None:
        held = db.execute("SELECT checkpoint_id FROM sink_batches WHERE sink = ? AND outcome = ? LIMIT 1",
                          [sink, APPLIED]).fetchone()
        others = [held[0]] if held else []
    else:
        others = foreign_checkpoints(db, sink, checkpoint_id)
    if others:
        raise ForeignCheckpoint(
            f"{sink}: the store holds batches of checkpoint {others[0]}, but "
            + ("the checkpoint is new" if checkpoint_id is None else f"this checkpoint is {checkpoint_id}")
            + f"; {fix}.")


def prune(conn, keep_batches: int, before_ts: int, folded: dict[str, int] | None = None, limit: int = 2000) -> int:
    """Delete the ledger rows no recovery can consult any more; the number deleted.

    A restart from a checkpoint hands batch ids above its last committed one, or replays that
    batch, and Spark keeps only the newest `keep_batches` (minBatchesToRetain) in its offset and
    commit logs: so per sink and checkpoint the applied and skipped rows more than `keep_batches`
    below its newest applied batch id go, once they are older than `before_ts` (the audit's
    horizon) and, for a sink an audit cut folds, folded by it (`folded`: {sink: ledger id}). Kept:
    the newest rows (the replay check, `ReusedBatch`'s newest id, `check_bound`, the real-time
    seed's cut) and every dropped row (at-most-once's losses are summed from them). At most
    `limit` rows per sink and checkpoint a call, so the caller's write transaction stays short."""
    deleted = 0
    heads = conn.execute("SELECT sink, checkpoint_id, max(batch_id) FROM sink_batches WHERE outcome = ? "
                         "GROUP BY sink, checkpoint_id", (APPLIED,)).fetchall()
    for sink, checkpoint_id, newest in heads:
        upto = (folded or {}).get(sink)
        deleted += conn.execute(
            "DELETE FROM sink_batches WHERE id IN (SELECT id FROM sink_batches WHERE sink = ? AND checkpoint_id = ? "
            "AND batch_id < ? AND outcome IN (?, ?) AND ts < ?" + (" AND id <= ?" if upto is not None else "")
            + " LIMIT ?)",
            (sink, checkpoint_id, newest - max(1, keep_batches), APPLIED, SKIPPED, before_ts,
             *([upto] if upto is not None else []), limit)).rowcount
    return deleted
