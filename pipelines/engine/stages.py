"""Where a micro-batch's time goes: Spark's own durations (the progress listener's row) and the
sink's stages inside foreachBatch, put side by side per batch.

Spark reports a batch's trigger in parts (latestOffset, getBatch, queryPlanning, addBatch,
walCommit, commitOffsets); addBatch is the sink, and in the fraud job the sink is where the batch
is computed (the Spark job that reads Kafka, parses, scores in the state and aggregates runs when
the sink collects it), decided, written to the store and to Kafka. `Stages` times those inside
the sink; `breakdown` joins both into one row per batch that adds up to the trigger's duration,
and `batch_breakdowns` reads those rows back from the store (the Checkpoints page and `bench
latency` both show them).
"""
from __future__ import annotations

import logging
import time

from controlplane.clock import now_ms

log = logging.getLogger(__name__)

# (column, what it is) in the order a batch runs them; `other` is what the parts leave unexplained
STAGES = (("offsets_ms", "offsets (latest offsets, batch range)"),
          ("planning_ms", "query planning"),
          ("compute_ms", "Spark job: read, parse, state, aggregate"),
          ("decide_ms", "decisions (driver, Python)"),
          ("store_ms", "store transaction"),
          ("kafka_ms", "Kafka transaction"),
          ("commit_ms", "checkpoint commit (offset and commit logs)"),
          ("other_ms", "other (sink set-up, listener, state maintenance)"))


class Stages:
    """Laps of one foreachBatch call, in milliseconds."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.last = clock()
        self.ms: dict[str, int] = {}

    def lap(self, name: str) -> int:
        now = self.clock()
        self.ms[name] = self.ms.get(name, 0) + round((now - self.last) * 1000)
        self.last = now
        return self.ms[name]

    def record(self, db, query: str, batch_id: int, rows: int) -> None:
        """Into `batch_stages`; a metric never fails the batch."""
        try:
            db["batch_stages"].insert({"query": query, "batch_id": batch_id, "ts": now_ms(), "rows": rows,
                                       **{k: self.ms.get(k) for k in ("compute_ms", "decide_ms", "store_ms",
                                                                      "kafka_ms")}},
                                      replace=True)
        except Exception as exc:  # noqa: BLE001
            log.warning("could not record the stages of batch %s: %s", batch_id, exc)


def breakdown(progress: dict, stages: dict | None) -> dict:
    """One batch's time by stage (STAGES) from its batch_progress row and its batch_stages row (None:
    the sink recorded nothing, e.g. an empty batch): the sink's stages split addBatch, and `other_ms`
    is the trigger's duration the parts leave over (never below 0)."""
    sink = {k: (stages or {}).get(k) or 0 for k in ("compute_ms", "decide_ms", "store_ms", "kafka_ms")}
    if not stages:
        sink["compute_ms"] = progress.get("trigger_ms") or 0  # addBatch undivided
    parts = {"offsets_ms": progress.get("offsets_ms") or 0, "planning_ms": progress.get("planning_ms") or 0,
             **sink, "commit_ms": progress.get("commit_ms") or 0}
    parts["other_ms"] = max(0, (progress.get("duration_ms") or 0) - sum(parts.values()))
    return parts


def batch_breakdowns(db, query: str = "fraud", limit: int = 40) -> list[dict]:
    """The newest `limit` batches with rows of `query` (oldest first), each split by stage
    (STAGES): its batch_progress row and the newest batch_stages row recorded before it (a batch
    run again after a restart has a sink row per run), as {batch_id, ts, rows, duration_ms, *STAGES}."""
    def rows(sql: str, args: list) -> list[dict]:
        cursor = db.conn.execute(sql, args)
        names = [c[0] for c in cursor.description]
        return [dict(zip(names, r)) for r in cursor.fetchall()]

    progress = rows("SELECT batch_id, ts, num_input_rows, duration_ms, trigger_ms, commit_ms, offsets_ms, "
                    "planning_ms FROM batch_progress WHERE query = ? AND num_input_rows > 0 "
                    "ORDER BY ts DESC LIMIT ?", [query, limit])
    if not progress:
        return []
    laps: dict[int, list[dict]] = {}
    for lap in rows("SELECT batch_id, ts, compute_ms, decide_ms, store_ms, kafka_ms FROM batch_stages "
                    "WHERE query = ? AND batch_id >= ? ORDER BY ts", [query, min(p["batch_id"] for p in progress)]):
        laps.setdefault(lap["batch_id"], []).append(lap)
    out = []
    for p in sorted(progress, key=lambda r: r["ts"]):
        mine = [lap for lap in laps.get(p["batch_id"], []) if lap["ts"] <= p["ts"]]
        out.append({"batch_id": p["batch_id"], "ts": p["ts"], "rows": p["num_input_rows"],
                    "duration_ms": p["duration_ms"], **breakdown(p, mine[-1] if mine else None)})
    return out
