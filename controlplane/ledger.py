"""The sink ledger: which batch each store sink applied, skipped or dropped (table `sink_batches`).

Every store sink (the usage guarantees, the windows, the fraud decisions) records the batch it
was handed inside the same fenced SQLite transaction as the batch's effect, so the ledger and
the effect can never disagree. A batch is named by the Spark checkpoint it belongs to (the
query id in the checkpoint's `metadata` file) and its batch id, and carries its Kafka offset
range from Spark's offset log: the auditor checks each sink against exactly the input records its
applications covered, and tells the query's own replays (the same batch applied twice) from
duplicates in the input.
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


def apply_once(conn, batch: Batch, epoch: int) -> bool:
    """Inside the sink's transaction: False (and a `skipped` record) when this batch was applied
    before, else an `applied` record and True; the caller then applies the batch's effect."""
    if was_applied(conn, batch):
        record(conn, batch, SKIPPED, epoch, "replay of a batch already applied")
        return False
    record(conn, batch, APPLIED, epoch)
    return True


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
