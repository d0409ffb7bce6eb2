"""Overview: rates in and out, decision latency, the jobs, and each query's consumer lag."""
from __future__ import annotations

import json

import pandas as pd

from dashboard.data.store import frame, now_ms, to_time

LATENCY_GOAL_MS = 20
RECENT_DECISIONS = 5000


def rates(db, now: int | None = None, window_s: int = 10) -> dict:
    """Transactions/s into the fraud job, decisions/s and fraud share over the last `window_s`.

    The input rate is Spark's own (inputRowsPerSecond of the fraud query's batches in the last
    30 s at least); None when the fraud query posted no batch in that time.
    """
    now = now or now_ms()
    n, fraud = db.conn.execute("SELECT COUNT(*), COALESCE(SUM(is_fraud), 0) FROM decisions "
                               "WHERE decided_at > ? AND decided_at <= ?", [now - window_s * 1000, now]).fetchone()
    rate_s = max(window_s, 30)
    avg, batches = db.conn.execute(
        "SELECT AVG(input_rows_per_s), COUNT(*) FROM batch_progress WHERE ts > ? AND ts <= ? AND query = 'fraud'",
        [now - rate_s * 1000, now]).fetchone()
    return {"transactions_per_s": float(avg) if batches else None, "rate_window_s": rate_s,
            "decisions_per_s": n / window_s, "fraud_rate": (fraud / n) if n else None,
            "decisions": n, "window_s": window_s}


def recent_latencies(db, limit: int = RECENT_DECISIONS) -> pd.DataFrame:
    """decided_at, latency_ms of the most recent decisions (decided_at − produced_at)."""
    return frame(db, "SELECT decided_at, decided_at - produced_at AS latency_ms FROM decisions "
                     "WHERE decided_at IS NOT NULL AND produced_at IS NOT NULL "
                     "ORDER BY decided_at DESC LIMIT ?", [limit])


def latency_summary(latencies: pd.DataFrame, goal_ms: float = LATENCY_GOAL_MS) -> dict:
    """p50/p95/p99 of decision latency (ms) and the share within the goal."""
    if latencies.empty:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "within_goal": None}
    ms = latencies["latency_ms"].astype(float)
    return {"n": int(ms.size), "p50": float(ms.quantile(0.50)), "p95": float(ms.quantile(0.95)),
            "p99": float(ms.quantile(0.99)), "within_goal": float((ms <= goal_ms).mean())}


def latency_series(latencies: pd.DataFrame, bucket_s: int = 5) -> pd.DataFrame:
    """Per time bucket: p50, p95, p99 latency (ms) and decisions per second."""
    if latencies.empty:
        return pd.DataFrame(columns=["time", "p50", "p95", "p99", "decisions_per_s"])
    df = latencies.assign(bucket=(latencies["decided_at"] // (bucket_s * 1000)) * bucket_s * 1000)
    grouped = df.groupby("bucket")["latency_ms"]
    out = pd.DataFrame({
        "p50": grouped.quantile(0.50), "p95": grouped.quantile(0.95), "p99": grouped.quantile(0.99),
        "decisions_per_s": grouped.size() / bucket_s,
    }).reset_index()
    out["time"] = to_time(out["bucket"])
    return out.drop(columns="bucket").sort_values("time")


def job_status(db, now: int | None = None) -> pd.DataFrame:
    """What the supervisor last wrote of each job (and standby), with how long ago."""
    now = now or now_ms()
    df = frame(db, "SELECT job, status, pid, restarts, last_batch, started_at, updated_at, detail "
                   "FROM job_status ORDER BY job LIMIT 50")
    if not df.empty:
        df["seen_s_ago"] = ((now - df["updated_at"].fillna(now)) / 1000).clip(lower=0)
        df["up_since"] = to_time(df["started_at"])
    return df


# --- consumer lag ---------------------------------------------------------------------------------

def parse_offsets(raw: str | None) -> dict[str, dict[int, int]]:
    """Spark's end offsets as batch_progress records them -> {topic: {partition: offset}}.

    The recorder stores a JSON list with one entry per source; each entry is Spark's own JSON
    (a string, or already an object): {"topic": {"0": 12, "1": 40}}.
    """
    if not raw:
        return {}
    try:
        sources = json.loads(raw)
    except (TypeError, ValueError):
        return {}
    if isinstance(sources, dict):
        sources = [sources]
    out: dict[str, dict[int, int]] = {}
    for source in sources or []:
        if isinstance(source, str):
            try:
                source = json.loads(source)
            except ValueError:
                continue
        if not isinstance(source, dict):
            continue
        for topic, parts in source.items():
            if isinstance(parts, dict):
                for p, off in parts.items():
                    if str(p).lstrip("-").isdigit() and isinstance(off, (int, float)):
                        out.setdefault(topic, {})[int(p)] = int(off)
    return out


def last_batch_offsets(db) -> dict[str, dict]:
    """Each query's last reported batch: {query: {"batch_id", "ts", "offsets": {topic: {p: offset}}}}.

    Spark reports a batch's progress after its commit, so these are the committed offsets.
    """
    df = frame(db, "SELECT b.query, b.batch_id, b.ts, b.end_offsets FROM batch_progress b "
                   "JOIN (SELECT query, MAX(ts) AS ts FROM batch_progress GROUP BY query) last "
                   "ON b.query = last.query AND b.ts = last.ts ORDER BY b.query LIMIT 100")
    return {r.query: {"batch_id": int(r.batch_id), "ts": int(r.ts), "offsets": parse_offsets(r.end_offsets)}
            for r in df.itertuples()}


def lag_topics(last_batches: dict[str, dict]) -> list[str]:
    return sorted({t for b in last_batches.values() for t in b["offsets"]})


def consumer_lag(end_offsets: dict[str, dict[int, int]] | None, last_batches: dict[str, dict]) -> pd.DataFrame:
    """Per query and topic: where its last batch got to, and with Kafka's end offsets (None: the
    broker is down) the end and the lag in records. Topics Kafka does not hold are left out."""
    rows = []
    for query, batch in sorted(last_batches.items()):
        for topic, parts in sorted(batch["offsets"].items()):
            row = {"query": query, "topic": topic, "last_batch": batch["batch_id"]}
            if end_offsets is None:
                rows.append({**row, "processed": sum(parts.values()), "kafka_end": None, "lag": None})
                continue
            ends = end_offsets.get(topic)
            if ends is None:
                continue
            done = sum(parts.get(p, 0) for p in ends)
            end = sum(ends.values())
            rows.append({**row, "processed": done, "kafka_end": end, "lag": max(end - done, 0)})
    return pd.DataFrame(rows, columns=["query", "topic", "last_batch", "processed", "kafka_end", "lag"])
