"""Event-time windows over decisions: tumbling 1 min, sliding 5 min every 1 min, sessions per card.

Each micro-batch is aggregated in the JVM (per-minute panes, and `session_window` per card), and the small per-window results are merged into the store table `windows` from the
driver, in ONE SQLite transaction together with the batch id and the advanced watermark, so a
replayed batch is skipped (the same exactly-once rule as the usage sink).

The watermark is Spark's rule, kept in the store (`usage_watermarks`) so it survives restarts:
for batch N it is max(event_time of batches before N) - settings.watermark_seconds. A row whose
event_time is behind it is too late: it is not added to any window but counted in `late_events`
for every window it would have belonged to (sessions: per minute of its event time, since a late
event's session is unknown), never dropped silently.

Input is deduplicated by txn_id as exactly-once's count is (`pipelines.usage.dedupe`: Spark's
dropDuplicatesWithinWatermark on the Kafka timestamp): the decisions topic is written exactly
once, but a txn_id sent twice by a producer upstream is two transactions to it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from controlplane import fencing, ledger
from controlplane.clock import now_ms
from infra.config import Settings
from pipelines.guarantees import RESET_FIX

QUERY = "usage-windows"
JOB = "usage"
MINUTE_MS = 60_000
SLIDING_PANES = 5  # sliding windows: 5 minutes long, every minute
ALL = "all"


@dataclass(frozen=True)
class WindowRow:
    kind: str
    key: str
    start: int
    end: int
    processed: int
    fraud: int


def current_watermark(conn, name: str = QUERY) -> tuple[int | None, int | None]:
    row = conn.execute("SELECT max_event_time, watermark FROM usage_watermarks WHERE name = ?",
                       (name,)).fetchone()
    return (row[0], row[1]) if row else (None, None)


def batch_results(df, watermark_ms: int | None, session_gap_s: int):
    """Aggregate one static batch of (card_id, event_time, event_ts, is_fraud) in the JVM.

    Two Spark jobs per batch: one per-minute pane aggregation (on-time count and fraud, late
    count, max event_time), from which the tumbling (1 pane) and sliding (5 panes every 1) windows
    are summed, and one session_window aggregation per card. Returns small Python lists:
    (fixed windows, sessions, late counts, max event_time).
    """
    from pyspark.sql import functions as F

    wm = F.lit(watermark_ms if watermark_ms is not None else -(2 ** 62)).cast("long")
    # a decision without an event time has no window (the fraud job never writes one; a foreign
    # producer could): it is counted by the usage queries, not placed in a window
    flagged = (df.where(F.col("event_time").isNotNull()).withColumn("late", F.col("event_time") < wm)
               .withColumn("fraud", F.col("is_fraud").cast("long")))
    pane = (F.col("event_time") - F.pmod(F.col("event_time"), F.lit(MINUTE_MS))).alias("pane")
    on_time = F.when(~F.col("late"), 1).otherwise(0)
    panes = (flagged.groupBy(pane)
             .agg(F.sum(on_time).alias("n"), F.sum(on_time * F.col("fraud")).alias("f"),
                  F.sum(F.col("late").cast("long")).alias("late"), F.max("event_time").alias("m"))
             .collect())
    sessions = (flagged.where(~F.col("late"))
                .groupBy("card_id", F.session_window("event_ts", f"{session_gap_s} seconds").alias("w"))
                .agg(F.count(F.lit(1)).alias("n"), F.sum("fraud").alias("f"))
                .select("card_id", F.unix_millis("w.start").alias("s"), F.unix_millis("w.end").alias("e"),
                        "n", "f")
                .collect())
    fixed, late_counts = panes_to_windows([(r["pane"], r["n"], r["f"], r["late"]) for r in panes])
    session_rows = [WindowRow("session", r["card_id"], r["s"], r["e"], r["n"], r["f"]) for r in sessions]
    max_event = max((r["m"] for r in panes if r["m"] is not None), default=None)
    return fixed, session_rows, late_counts, max_event


def panes_to_windows(panes: list[tuple[int, int, int, int]]):
    """Per-minute panes (start, on-time n, fraud, late) -> tumbling and sliding window increments.

    Tumbling 1 min is one pane; sliding 5 min every 1 min starting at S sums panes S .. S+4 min,
    so each pane adds to the 5 sliding windows that contain it. Late counts follow the same rule;
    sessions count their late events per minute pane (a late event's session is unknown).
    """
    fixed: dict[tuple, list[int]] = {}
    late: dict[tuple, int] = {}
    for start, n, f, lt in panes:
        targets = [("tumbling", start, start + MINUTE_MS)]
        targets += [("sliding", start - k * MINUTE_MS, start - k * MINUTE_MS + SLIDING_PANES * MINUTE_MS)
                    for k in range(SLIDING_PANES)]
        for kind, s, e in targets:
            if n:
                acc = fixed.setdefault((kind, s, e), [0, 0])
                acc[0] += n
                acc[1] += f
            if lt:
                late[(kind, s)] = late.get((kind, s), 0) + lt
        if lt:
            late[("session", start)] = late.get(("session", start), 0) + lt
    rows = [WindowRow(kind, ALL, s, e, n, f) for (kind, s, e), (n, f) in sorted(fixed.items())]
    return rows, [(kind, s, c) for (kind, s), c in sorted(late.items())]


def apply_batch(conn, batch: ledger.Batch, fixed: list[WindowRow], sessions: list[WindowRow],
                late_counts: list[tuple[str, int, int]], max_event: int | None, watermark_s: int,
                epoch: int, name: str = QUERY) -> bool:
    """Merge one batch's window results into the store (inside the caller's fenced transaction).

    Returns False when the batch was applied before (a replay): nothing changes then. Raises
    ledger.ReusedBatch when its id was applied over another Kafka range (the checkpoint was
    restored or lost logs).
    """
    batch = replace(batch, processed=sum(w.processed for w in fixed if w.kind == "tumbling"),
                    fraud=sum(w.fraud for w in fixed if w.kind == "tumbling"))
    if not ledger.apply_once(conn, batch, epoch, RESET_FIX):
        return False
    ts = now_ms()
    for w in fixed:
        conn.execute("INSERT INTO windows (kind, key, window_start, window_end, processed, fraud, updated_at) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(kind, key, window_start) DO UPDATE SET "
                     "processed = processed + excluded.processed, fraud = fraud + excluded.fraud, "
                     "updated_at = excluded.updated_at", (w.kind, w.key, w.start, w.end, w.processed, w.fraud, ts))
    for w in sessions:
        merge_session(conn, w, ts)
    for kind, start, count in late_counts:
        conn.execute("INSERT INTO late_events (kind, window_start, count) VALUES (?, ?, ?) "
                     "ON CONFLICT(kind, window_start) DO UPDATE SET count = count + excluded.count",
                     (kind, start, count))
    old_max, _ = current_watermark(conn, name)
    if max_event is not None:
        new_max = max(old_max or max_event, max_event)
        conn.execute("INSERT INTO usage_watermarks (name, max_event_time, watermark, updated_at) "
                     "VALUES (?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET max_event_time = excluded.max_event_time, "
                     "watermark = excluded.watermark, updated_at = excluded.updated_at",
                     (name, new_max, new_max - watermark_s * 1000, ts))
    return True


def merge_session(conn, w: WindowRow, ts: int) -> None:
    """Sessions [first event, last event + gap) of one card merge when they overlap."""
    start, end, n, f = w.start, w.end, w.processed, w.fraud
    rows = conn.execute("SELECT window_start, window_end, processed, fraud FROM windows WHERE kind = 'session' "
                        "AND key = ? AND window_start < ? AND window_end > ?", (w.key, end, start)).fetchall()
    for s0, e0, n0, f0 in rows:
        start, end, n, f = min(start, s0), max(end, e0), n + n0, f + f0
        conn.execute("DELETE FROM windows WHERE kind = 'session' AND key = ? AND window_start = ?", (w.key, s0))
    conn.execute("INSERT INTO windows (kind, key, window_start, window_end, processed, fraud, updated_at) "
                 "VALUES ('session', ?, ?, ?, ?, ?, ?)", (w.key, start, end, n, f, ts))


def windowed_stream(source, s: Settings):
    """Kafka rows of `decisions` -> what the windows query aggregates (deduplicated by txn_id)."""
    from pipelines.engine.sources import parse_decisions
    from pipelines.usage.dedupe import deduplicated

    return deduplicated(parse_decisions(source, s=s), s).select("card_id", "event_time", "event_ts", "is_fraud")


def start_query(spark, s: Settings, epoch: int, db, on_fenced=None, checkpoint: str | None = None,
                topic: str | None = None, trigger_seconds: float | None = None, on_refused=None):
    """Start the windows query on `decisions` (its own durable checkpoint under checkpoint_root).
    `on_fenced(db, epoch, exc, what)` and `on_refused(exc)` end the process (else the batch fails)."""
    from pipelines.engine.checkpoints import ledger_batch
    from pipelines.engine.sources import read_kafka

    checkpoint = checkpoint or s.checkpoint_root / QUERY  # a Path or a Location (infra.storage)
    stream = windowed_stream(read_kafka(spark, topic or s.topics.decisions, s, starting_offsets="earliest",
                                        max_offsets_per_trigger=s.usage_max_offsets), s)

    def handle(df, batch_id):
        df.persist()
        try:
            _, watermark = current_watermark(db.conn)
            fixed, sessions, late, max_event = batch_results(df, watermark, s.session_gap_seconds)
        finally:
            df.unpersist()
        try:
            with fencing.fenced_write(db, JOB, epoch, f"{QUERY} batch {batch_id}") as conn:
                apply_batch(conn, ledger_batch(QUERY, checkpoint, batch_id), fixed, sessions, late, max_event,
                            s.watermark_seconds, epoch)
        except fencing.FencedError as exc:
            if on_fenced is None:
                raise
            on_fenced(db, epoch, exc, f"{QUERY} batch {batch_id}")
        except ledger.ReusedBatch as exc:
            if on_refused is None:
                raise
            on_refused(exc)

    return (stream.writeStream.queryName(QUERY).foreachBatch(handle)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=f"{trigger_seconds or s.usage_trigger_seconds} seconds")
            .start())
