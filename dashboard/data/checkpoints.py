"""Checkpoints & state: every micro-batch, the state it keeps, where each checkpoint stands, and
the batches run again after a restart, from Spark's own logs and the sink ledger.

- `batches`, `state_now`: Spark's progress per batch (StreamingQueryListener, `batch_progress`).
- `stage_breakdown`: where each fraud batch's time went, Spark's parts and the sink's
  (`batch_stages`, `pipelines.engine.stages`).
- `positions`: each checkpoint as Spark left it on disk (`pipelines.engine.checkpoints`): its query
  id, the newest committed batch and the newest planned one; planned beyond committed is a batch
  running now, or one that a stop cut short and the next run replays.
- `log_reruns`: batches whose offset-log entry was written before a restart of their job and
  whose commit after it: planned, not committed before the restart, run again after it.
- `ledger_repeats`: batches a store sink was handed more than once (same checkpoint id and batch
  id): applied twice (at-least-once), applied then skipped (exactly-once, the fraud sinks, the
  windows).
- `process_memory`, `memory_now`, `storage`, `retention`: what the supervisor's housekeeping
  sampled (`pipelines/supervisor/housekeeping.py`): each long-lived process's resident memory, the
  bytes of the store, the checkpoints and the broker's data, and what the store's retention deleted.
"""
from __future__ import annotations

import json
import pandas as pd

from controlplane import ledger
from dashboard.data.store import LEDGER_ROWS, frame, now_ms, since, to_time
from infra import storage as files  # `storage` below is the disk figures' frame
from infra.contracts import GUARANTEES
from infra.storage import Place
from pipelines.engine import checkpoints
from pipelines.engine.stages import STAGES, batch_breakdowns
from pipelines.guarantees import POLICIES

WINDOWS_QUERY = "usage-windows"


def batches(db, now: int | None = None, minutes: float = 15, limit: int = 5000) -> pd.DataFrame:
    """Batch history of every query (oldest first): durations, commit time, state rows and bytes."""
    df = frame(db, "SELECT query, batch_id, ts, num_input_rows, input_rows_per_s, processed_rows_per_s, "
                   "duration_ms, trigger_ms, commit_ms, state_rows, state_memory_bytes, "
                   "state_rows_dropped_late, state_rows_removed, watermark, event_time_max, checkpoint "
                   "FROM batch_progress WHERE ts > ? ORDER BY ts DESC LIMIT ?", [since(now, minutes), limit])
    df["time"] = to_time(df["ts"])
    # the watermark's gap to the newest event the batch saw (Spark's eventTime max and watermark;
    # none for a query without a watermark)
    newest = pd.to_datetime(df["event_time_max"], errors="coerce", utc=True)
    mark = pd.to_datetime(df["watermark"], errors="coerce", utc=True)
    mark = mark.where(mark > pd.Timestamp(0, tz="UTC"))  # Spark reports 0 (1970) until a watermark is set
    df["watermark_gap_s"] = (newest - mark).dt.total_seconds()
    return df.sort_values("ts").reset_index(drop=True)


def stage_breakdown(db, query: str = "fraud", limit: int = 40) -> pd.DataFrame:
    """The newest `limit` batches with rows of `query` (oldest first), each split by stage
    (`pipelines.engine.stages.batch_breakdowns`): Spark's durations and the sink's own laps."""
    rows = batch_breakdowns(db, query, limit)
    if not rows:
        return pd.DataFrame(columns=["batch_id", "time", "rows", "duration_ms", *(k for k, _ in STAGES)])
    out = pd.DataFrame(rows)
    out["time"] = to_time(out["ts"])
    return out


def state_now(batch_df: pd.DataFrame) -> pd.DataFrame:
    """Per query: the newest batch's state rows and bytes, its median batch and commit times."""
    columns = ["query", "last_batch", "state_rows", "state_memory_bytes", "median_commit_ms",
               "median_duration_ms", "checkpoint"]
    if batch_df.empty:
        return pd.DataFrame(columns=columns)
    last = batch_df.sort_values("ts").groupby("query").tail(1).set_index("query")
    med = batch_df.groupby("query")[["commit_ms", "duration_ms"]].median()
    return pd.DataFrame({
        "last_batch": last["batch_id"], "state_rows": last["state_rows"],
        "state_memory_bytes": last["state_memory_bytes"],
        "median_commit_ms": med["commit_ms"], "median_duration_ms": med["duration_ms"],
        "checkpoint": last["checkpoint"],
    }).reset_index()[columns]


# --- Spark's own logs -----------------------------------------------------------------------------

def folders(root: Place) -> dict[str, tuple[str, Place]]:
    """{query: (job, checkpoint folder)} of every streaming query CardStream runs (`root`: a local
    Path or a Location, infra.storage)."""
    out = {p.query: ("usage", root / p.query) for p in (POLICIES[g] for g in GUARANTEES)}
    out[WINDOWS_QUERY] = ("usage", root / WINDOWS_QUERY)
    out.update({"fraud": ("fraud", root / "fraud" / "decisions"), "fraud-dlq": ("fraud", root / "fraud" / "dlq"),
                "fraud-rt": ("fraud", root / "fraud" / "realtime")})
    return out


def planned_at(folder: Place, batch_id: int) -> int | None:
    """When Spark planned a batch: batchTimestampMs in its offset-log entry (kept on a replay)."""
    try:
        lines = (files.read_text(checkpoints.resolve(folder) / "offsets" / str(batch_id)) or "").splitlines()
        meta = json.loads(lines[1]) if len(lines) > 1 and lines[0].startswith("v") else {}
        value = meta.get("batchTimestampMs")
        return int(value) if value else None
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return None


def committed_at(folder: Place, batch_id: int) -> int | None:
    """When Spark committed a batch: the time its commit-log file was written."""
    entry = files.stat(checkpoints.resolve(folder) / "commits" / str(batch_id))
    return entry.mtime_ms if entry else None


def _ids(folder: Place) -> list[int]:
    return sorted(int(e.name) for e in files.entries(folder) if e.name.isdigit())


def positions(root: Place, now: int | None = None) -> pd.DataFrame:
    """Where each checkpoint stands, read from its files: query id, committed and planned batch,
    and, for a batch planned but not committed, when it was planned."""
    now = now or now_ms()
    rows = []
    for query, (job, folder) in folders(root).items():
        pos = checkpoints.position(folder)
        if pos.query_id is None and pos.planned_batch is None:
            continue
        rows.append({"query": query, "job": job, "folder": str(folder), "query_id": pos.query_id,
                     "committed_batch": pos.committed_batch, "planned_batch": pos.planned_batch,
                     "uncommitted": pos.uncommitted,
                     "committed_at": committed_at(folder, pos.committed_batch) if pos.committed_batch is not None
                     else None,
                     "planned_at": planned_at(folder, pos.planned_batch) if pos.uncommitted else None})
    df = pd.DataFrame(rows, columns=["query", "job", "folder", "query_id", "committed_batch", "planned_batch",
                                     "uncommitted", "committed_at", "planned_at"])
    df["planned_s_ago"] = (now - df["planned_at"]) / 1000
    return df


def restart_times(db, start_ms: int) -> pd.DataFrame:
    """Measured instants a job's process stopped or started since `start_ms`: the supervisor's kills
    (recoveries), crash-after-sink's own SIGKILL (its command's end), and the running process's start."""
    return frame(db, "SELECT job, killed_at AS at, CASE WHEN fault = 'exit' THEN 'exited' ELSE 'killed by ' || fault END AS what FROM recoveries WHERE killed_at > ? "
                     "UNION ALL SELECT job, done_at, 'killed itself (crash-after-sink #' || id || ')' FROM commands "
                     "WHERE kind = 'crash-after-sink' AND status = 'done' AND done_at > ? "
                     "UNION ALL SELECT job, started_at, 'started' FROM job_status WHERE started_at > ? "
                     "ORDER BY at LIMIT 1000", [start_ms, start_ms, start_ms])


def log_reruns(root: Place, restarts: pd.DataFrame) -> pd.DataFrame:
    """Batches still in the logs that were planned before a restart of their job and committed
    after it (the commit came from the next run: it ran the batch again, with the same offsets)."""
    rows = []
    for query, (job, folder) in folders(root).items():
        mine = restarts[restarts["job"] == job].sort_values("at") if not restarts.empty else restarts
        if mine.empty:
            continue
        spark_folder = checkpoints.resolve(folder)
        committed = set(_ids(spark_folder / "commits"))
        for batch_id in _ids(spark_folder / "offsets"):
            if batch_id not in committed:
                continue
            planned, done = planned_at(folder, batch_id), committed_at(folder, batch_id)
            if planned is None or done is None:
                continue
            between = mine[(mine["at"] > planned) & (mine["at"] < done)]
            if not between.empty:
                first = between.iloc[0]
                rows.append({"query": query, "batch_id": batch_id, "planned_at": planned, "restart_at": int(first["at"]),
                             "what": first["what"], "committed_at": done})
    df = pd.DataFrame(rows, columns=["query", "batch_id", "planned_at", "restart_at", "what", "committed_at"])
    for col in ("planned_at", "restart_at", "committed_at"):
        df[col.removesuffix("_at")] = to_time(df[col])
    return df.sort_values("committed_at", ascending=False).reset_index(drop=True)


# --- the sink ledger ------------------------------------------------------------------------------

def ledger_repeats(db, now: int | None = None, minutes: float = 60, limit: int = 50) -> pd.DataFrame:
    """Batches a store sink was handed more than once (one checkpoint id, one batch id) in the last
    `minutes`: the outcomes in order, how many applied, the first and last time."""
    df = frame(db, "SELECT sink, checkpoint_id, batch_id, COUNT(*) AS handed, "
                   "SUM(outcome = ?) AS applied, SUM(outcome = ?) AS skipped, "
                   "GROUP_CONCAT(outcome, ', ') AS outcomes, MIN(ts) AS first_ts, MAX(ts) AS last_ts, "
                   "MAX(processed) AS processed FROM (SELECT * FROM sink_batches WHERE ts > ? "
                   "AND id > (SELECT COALESCE(MAX(id), 0) FROM sink_batches) - ? ORDER BY id) "
                   "GROUP BY sink, checkpoint_id, batch_id HAVING COUNT(*) > 1 ORDER BY last_ts DESC LIMIT ?",
               [ledger.APPLIED, ledger.SKIPPED, since(now, minutes), LEDGER_ROWS, limit])
    df["first"] = to_time(df["first_ts"])
    df["last"] = to_time(df["last_ts"])
    return df


# --- memory and disk (the supervisor's housekeeping) ----------------------------------------------

MEMORY_HOURS = 24  # the span the page draws: the store keeps STORE_RETENTION_HOURS (24 by default)


def process_memory(db, now: int | None = None, hours: float = MEMORY_HOURS, limit: int = 50_000) -> pd.DataFrame:
    """Resident memory per process over time (oldest first), from `process_memory`: one row per
    process and sample; `process` is a role (after a takeover `fraud` is another pid)."""
    df = frame(db, "SELECT ts, process, pid, rss_mb FROM process_memory WHERE ts > ? ORDER BY ts DESC LIMIT ?",
               [since(now, hours * 60), limit])
    df["time"] = to_time(df["ts"])
    return df.sort_values(["ts", "process"]).reset_index(drop=True)


def memory_now(df: pd.DataFrame) -> pd.DataFrame:
    """Per process: its newest sample, its first in the span, the change between them (%), and
    how many processes (pids) held the role in the span. Largest absolute change first."""
    columns = ["process", "rss_mb", "first_mb", "change_pct", "pids", "ts"]
    if df.empty:
        return pd.DataFrame(columns=columns)
    g = df.sort_values("ts").groupby("process")
    out = pd.DataFrame({"rss_mb": g["rss_mb"].last(), "first_mb": g["rss_mb"].first(), "pids": g["pid"].nunique(),
                        "ts": g["ts"].last()})
    out["change_pct"] = (out["rss_mb"] - out["first_mb"]) / out["first_mb"] * 100
    out = out.reset_index()
    return out.reindex(out["change_pct"].abs().sort_values(ascending=False).index)[columns].reset_index(drop=True)


def storage(db, now: int | None = None, hours: float = MEMORY_HOURS, limit: int = 10_000) -> pd.DataFrame:
    """Bytes on disk over time (oldest first), from `storage_bytes`: the store, the checkpoints, the
    broker's data."""
    df = frame(db, "SELECT ts, what, path, bytes FROM storage_bytes WHERE ts > ? "
                   "AND what IN ('store', 'checkpoints', 'kafka') ORDER BY ts DESC LIMIT ?",
               [since(now, hours * 60), limit])
    df["time"] = to_time(df["ts"])
    df["mib"] = df["bytes"] / 2**20
    return df.sort_values(["ts", "what"]).reset_index(drop=True)


def retention(db) -> pd.DataFrame:
    """What the store's retention deleted, per table: the horizon, the last pass, all passes."""
    return frame(db, "SELECT name, horizon, deleted, deleted_total, ran_at FROM store_retention ORDER BY name")
