"""Overview: rates in and out, decision latency, the jobs, and each query's consumer lag.

Decision latency is measured as `bench latency` measures it: the decision's append time on its
Kafka topic minus its transaction's append time on the transactions topic, both the broker's clock
(dashboard.data.kafka.append_latencies); frames of it carry `tx_appended`, `dec_appended` and
`latency_ms`."""
from __future__ import annotations

import json

import pandas as pd

from dashboard.data.store import frame, now_ms, to_time

LATENCY_GOAL_MS = 20
RECENT_DECISIONS = 2000
BUCKET_S = 5  # the latency and throughput series' time buckets
LATENCY_COLUMNS = ["tx_appended", "dec_appended", "latency_ms"]


def rates(db, topic: str, now: int | None = None, window_s: int = 10) -> dict:
    """Transactions/s into the fraud job, decisions/s and fraud share over the last `window_s`.

    The input rate is Spark's own, of the fraud query's `topic` source alone (its
    inputRowsPerSecond in the batches of the last 30 s at least: the query's own rate sums its
    labels source in too); None when the fraud query posted no batch in that time, or only a first
    batch after a start (Spark reports 0 rows/s for it).
    """
    now = now or now_ms()
    n, fraud = db.conn.execute("SELECT COUNT(*), COALESCE(SUM(is_fraud), 0) FROM decisions "
                               "WHERE decided_at > ? AND decided_at <= ?", [now - window_s * 1000, now]).fetchone()
    rate_s = max(window_s, 30)
    per_s, rows = f'$."{topic}".per_s', f'$."{topic}".rows'
    # a query's first batch after a start reports 0 rows/s whatever it read (Spark has no earlier
    # trigger to measure from): such a batch says nothing about the rate
    avg, batches = db.conn.execute(
        "SELECT AVG(json_extract(sources, ?)), COUNT(*) FROM batch_progress WHERE ts > ? AND ts <= ? "
        "AND query = 'fraud' AND json_valid(sources) AND json_extract(sources, ?) IS NOT NULL "
        "AND NOT (json_extract(sources, ?) = 0 AND json_extract(sources, ?) > 0)",
        [per_s, now - rate_s * 1000, now, per_s, per_s, rows]).fetchone()
    return {"transactions_per_s": float(avg) if batches else None, "rate_window_s": rate_s,
            "decisions_per_s": n / window_s, "fraud_rate": (fraud / n) if n else None,
            "decisions": n, "window_s": window_s}


def latency_frame(pairs: list[tuple[int, int]]) -> pd.DataFrame:
    """(transaction appended, decision appended) pairs, ms on the broker's clock -> a latency frame."""
    df = pd.DataFrame(pairs, columns=LATENCY_COLUMNS[:2], dtype="int64")
    df["latency_ms"] = df["dec_appended"] - df["tx_appended"]
    return df


# --- the start: what is starting, and the decisions that waited for it ---------------------------

SPARK_JOBS = {"fraud": "fraud", "usage": "usage-%"}   # job -> its queries in batch_progress


def _lease(db, job: str) -> dict | None:
    row = db.conn.execute("SELECT epoch, holder, taken_at FROM leases WHERE job = ?", [job]).fetchone()
    return {"epoch": row[0], "holder": row[1], "taken_at": row[2]} if row else None


def _first_batch_since(db, job: str, since_ms: int) -> dict | None:
    """The first batch the job's queries committed since `since_ms`: when it started (its progress
    time minus its duration) and when Spark posted it."""
    row = db.conn.execute("SELECT batch_id, ts, duration_ms, query FROM batch_progress WHERE query LIKE ? AND ts >= ? "
                          "ORDER BY ts LIMIT 1", [SPARK_JOBS[job], since_ms]).fetchone()
    if not row:
        return None
    return {"batch_id": row[0], "ts": row[1], "started": row[1] - (row[2] or 0), "query": row[3]}


def startup(db, now: int | None = None) -> list[dict]:
    """Each Spark job the supervisor runs that has not committed a batch since its instance took the
    lease, and the phase it is in: "session" (process up, no lease yet: the job takes its lease
    right after its SparkSession is up) or "first-batch" (session up and lease taken, queries
    started, no batch committed since). From job_status, leases and batch_progress."""
    now = now or now_ms()
    jobs = job_status(db, now)
    out = []
    for job in SPARK_JOBS:
        rows = jobs[jobs["job"] == job] if not jobs.empty else jobs
        if rows.empty:
            continue
        j = rows.iloc[0]
        if j["status"] != "running" or pd.isna(j["pid"]) or pd.isna(j["started_at"]):
            continue
        up_s = max(0.0, (now - int(j["started_at"])) / 1000)
        lease = _lease(db, job)
        holder_pid = (lease["holder"] or "").rsplit(":", 1)[-1] if lease else ""
        mine = lease is not None and holder_pid == str(int(j["pid"]))
        if not mine:
            out.append({"job": job, "phase": "session", "pid": int(j["pid"]), "up_s": up_s, "queries_s": None,
                        "epoch": None})
            continue
        if _first_batch_since(db, job, int(lease["taken_at"])) is not None:
            continue
        out.append({"job": job, "phase": "first-batch", "pid": int(j["pid"]), "up_s": up_s,
                    "queries_s": max(0.0, (now - int(lease["taken_at"])) / 1000), "epoch": lease["epoch"]})
    return out


def warmup(db) -> dict | None:
    """The fraud job's start the newest decisions waited for: the first batch its current instance
    (the lease holder) committed. Decisions of transactions produced before that batch started and
    decided after it started waited for the job to start, not for a decision: the warm-up.
    None when the fraud job holds no lease or has committed no batch since taking it."""
    lease = _lease(db, "fraud")
    if lease is None or lease["taken_at"] is None:
        return None
    first = _first_batch_since(db, "fraud", int(lease["taken_at"]))
    if first is None:
        return None
    return {"taken_at": int(lease["taken_at"]), "epoch": lease["epoch"], "batch_id": first["batch_id"],
            "batch_started": int(first["started"]), "batch_done": int(first["ts"])}


def split_warmup(latencies: pd.DataFrame, cut: int | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(steady, warm-up) decisions: warm-up = the transaction reached Kafka before `cut` (the
    start of the fraud job's first batch of its current instance, or of its real-time query) and
    its decision after it: they waited through the start."""
    if cut is None or latencies.empty:
        return latencies.reset_index(drop=True), latencies.head(0)
    warm = (latencies["tx_appended"] < cut) & (latencies["dec_appended"] >= cut)
    return latencies[~warm].reset_index(drop=True), latencies[warm].reset_index(drop=True)


def rt_start(db) -> int | None:
    """When the fraud job's real-time query last started (fraud_rt_runs); None: it never ran."""
    row = db.conn.execute("SELECT MAX(started_at) FROM fraud_rt_runs").fetchone()
    return int(row[0]) if row and row[0] is not None else None


def rt_running(db) -> bool:
    """Whether the fraud job's current instance (the lease's epoch) started the real-time query:
    the job runs that path now, not in a run before this one."""
    lease = _lease(db, "fraud")
    row = db.conn.execute("SELECT epoch FROM fraud_rt_runs ORDER BY started_at DESC, id DESC LIMIT 1").fetchone()
    return lease is not None and row is not None and row[0] == lease["epoch"]


# --- the timeline: every command with its outcome and recovery ---------------------------------

def timeline(db, start_ms: int, end_ms: int | None = None, limit: int = 200) -> pd.DataFrame:
    """Commands (faults and controls) issued in [start_ms, end_ms], oldest first, with their outcome
    and, for a fault the supervisor measured, its recovery (killed_at → recovered_at, via)."""
    end_ms = end_ms or now_ms()
    df = frame(db, "SELECT c.id, c.kind, c.job, c.status, c.issued_at, c.started_at, c.done_at, c.result, "
                   "r.killed_at, r.recovered_at, r.seconds AS recovered_s, r.via FROM commands c "
                   "LEFT JOIN recoveries r ON r.command_id = c.id "
                   "WHERE c.issued_at >= ? AND c.issued_at <= ? ORDER BY c.issued_at LIMIT ?",
               [start_ms, end_ms, limit])
    df["at"] = df["started_at"].fillna(df["issued_at"])
    df["time"] = to_time(df["at"])
    df["killed"] = to_time(df["killed_at"])
    df["recovered"] = to_time(df["recovered_at"])
    return df


def latency_summary(latencies: pd.DataFrame, goal_ms: float = LATENCY_GOAL_MS) -> dict:
    """p50/p95/p99 of decision latency (ms) and the share within the goal."""
    if latencies.empty:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "within_goal": None}
    ms = latencies["latency_ms"].astype(float)
    return {"n": int(ms.size), "p50": float(ms.quantile(0.50)), "p95": float(ms.quantile(0.95)),
            "p99": float(ms.quantile(0.99)), "within_goal": float((ms <= goal_ms).mean())}


def latency_series(latencies: pd.DataFrame, bucket_s: int = BUCKET_S) -> pd.DataFrame:
    """Per time bucket: p50, p95, p99 latency (ms) and decisions per second."""
    if latencies.empty:
        return pd.DataFrame(columns=["time", "p50", "p95", "p99", "decisions_per_s"])
    df = latencies.assign(bucket=(latencies["dec_appended"] // (bucket_s * 1000)) * bucket_s * 1000)
    grouped = df.groupby("bucket")["latency_ms"]
    out = pd.DataFrame({
        "p50": grouped.quantile(0.50), "p95": grouped.quantile(0.95), "p99": grouped.quantile(0.99),
        "decisions_per_s": grouped.size() / bucket_s,
    }).reset_index()
    out["time"] = to_time(out["bucket"])
    return out.drop(columns="bucket").sort_values("time")


def cluster_ui(s) -> str | None:
    """The Spark master's UI when the jobs run on the local standalone cluster (CLUSTER=1,
    `make cluster-up`): its workers, applications and executors. None on a local master, or on
    a master elsewhere, whose UI address this process cannot know."""
    if s.spark_master != s.spark_master_url:
        return None
    return f"http://127.0.0.1:{s.spark_master_ui_port}"


def job_status(db, now: int | None = None) -> pd.DataFrame:
    """What the supervisor last wrote of each job (and standby), with how long ago."""
    now = now or now_ms()
    df = frame(db, "SELECT job, status, pid, restarts, last_batch, started_at, updated_at, detail, ui_url, ui_pid "
                   "FROM job_status ORDER BY job LIMIT 50")
    if not df.empty:
        df["seen_s_ago"] = ((now - df["updated_at"].fillna(now)) / 1000).clip(lower=0)
        df["up_since"] = to_time(df["started_at"])
        # the Spark UI of the process the row describes now (not of one that has gone)
        live = df["status"].isin(["running", "ready", "standby"]) & df["ui_pid"].notna() & (df["ui_pid"] == df["pid"])
        df["spark_ui"] = df["ui_url"].where(live)
    else:
        df["spark_ui"] = pd.Series(dtype=object)
    return df


def standby_gaps(jobs: pd.DataFrame) -> list[str]:
    """A sentence per Spark job with no ready warm standby (a crash of it now is a cold restart),
    from job_status; one sentence when the supervisor keeps no standby at all."""
    if jobs.empty:
        return []
    status = dict(zip(jobs["job"], jobs["status"]))
    detail = dict(zip(jobs["job"], jobs["detail"].fillna("")))
    running = [j for j in ("fraud", "usage") if status.get(j) == "running"]
    if running and not any(f"{j}-standby" in status for j in running):
        return [f"No warm standby: the supervisor runs without one (`--standby`, STANDBY=1), so a crash of "
                f"{' or '.join(running)} is a cold restart: a new driver and Spark JVM."]
    out = []
    for job in running:
        state = status.get(f"{job}-standby")
        if state is not None and state != "ready":
            why = detail.get(f"{job}-standby") or state
            then = ("waits for that standby's session to come up" if state == "standby"  # its process started
                    else "is a cold restart: a new driver and Spark JVM")
            out.append(f"{job} has no ready standby ({why}): a crash of it now {then}.")
    return out


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
