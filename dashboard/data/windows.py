"""Windows: the usage job's event-time windows, each query's watermark, and what came too late."""
from __future__ import annotations

import pandas as pd

from dashboard.data.store import frame, now_ms, since, to_time

KINDS = ("tumbling", "sliding", "session")


def windows(db, kind: str, now: int | None = None, minutes: float = 30, limit: int = 2000) -> pd.DataFrame:
    """The window results of one kind whose start is in the last `minutes`, newest first."""
    df = frame(db, "SELECT kind, key, window_start, window_end, processed, fraud, updated_at FROM windows "
                   "WHERE kind = ? AND window_start > ? ORDER BY window_start DESC LIMIT ?",
               [kind, since(now, minutes), limit])
    df["start"] = to_time(df["window_start"])
    df["end"] = to_time(df["window_end"])
    df["length_s"] = (df["window_end"] - df["window_start"]) / 1000
    return df


def watermarks(db, now: int | None = None) -> pd.DataFrame:
    """Each query's newest watermark (ms) and how far it trails the wall clock (s).

    Two sources: Spark's own event-time watermark per query (batch_progress, an ISO string), and
    the windows query's watermark kept in the store (usage_watermarks, ms) so it survives restarts;
    the store's wins for the windows query.
    """
    now = now or now_ms()
    spark = frame(db, "SELECT b.query, b.watermark FROM batch_progress b "
                      "JOIN (SELECT query, MAX(ts) AS ts FROM batch_progress WHERE watermark IS NOT NULL "
                      "AND watermark != '' GROUP BY query) last ON b.query = last.query AND b.ts = last.ts "
                      "ORDER BY b.query LIMIT 100")
    stored = frame(db, "SELECT name AS query, watermark, max_event_time FROM usage_watermarks "
                       "WHERE watermark IS NOT NULL ORDER BY name LIMIT 20")
    rows = {r.query: {"query": r.query, "watermark_ms": int(r.watermark), "source": "store"}
            for r in stored.itertuples()}
    if not spark.empty:
        parsed = pd.to_datetime(spark["watermark"], utc=True, errors="coerce", format="ISO8601")
        for query, ts in zip(spark["query"], parsed):
            ms = int(ts.value // 1_000_000) if pd.notna(ts) else 0
            if ms > 0 and query not in rows:
                rows[query] = {"query": query, "watermark_ms": ms, "source": "spark"}
    df = pd.DataFrame(list(rows.values()), columns=["query", "watermark_ms", "source"])
    df["watermark_ms"] = df["watermark_ms"].astype("int64")
    df["watermark"] = to_time(df["watermark_ms"])
    df["behind_s"] = (now - df["watermark_ms"]) / 1000
    return df.sort_values("query").reset_index(drop=True)


def late_events(db) -> pd.DataFrame:
    """Late events the usage job counted instead of adding them to a window, per window kind."""
    return frame(db, "SELECT kind, SUM(count) AS dropped, COUNT(*) AS windows FROM late_events "
                     "GROUP BY kind ORDER BY kind LIMIT 20")


def late_series(db, now: int | None = None, minutes: float = 30) -> pd.DataFrame:
    df = frame(db, "SELECT kind, window_start, count FROM late_events WHERE window_start > ? "
                   "ORDER BY window_start LIMIT 5000", [since(now, minutes)])
    df["start"] = to_time(df["window_start"])
    return df


def dropped_by_watermark(db, now: int | None = None, minutes: float = 30) -> pd.DataFrame:
    """Rows Spark's stateful operators dropped as too late, per query, over the last `minutes`."""
    return frame(db, "SELECT query, SUM(state_rows_dropped_late) AS dropped FROM batch_progress "
                     "WHERE ts > ? GROUP BY query ORDER BY query LIMIT 100", [since(now, minutes)])
