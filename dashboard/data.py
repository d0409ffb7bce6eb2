"""Every query the dashboard runs: plain functions over a store connection (and Kafka), no Streamlit.

Each takes the store (a sqlite_utils Database from pipelines.store.connect) and, where time
matters, `now` in ms, and returns a pandas DataFrame or a dict, so it can be tested on a seeded
SQLite file. Every read is bounded by time or by LIMIT: the pages refresh every few seconds
against tables the jobs keep growing. Nothing here writes, except `issue`, which only adds a
command for the supervisor or the simulator.
"""
from __future__ import annotations

import json
import time
from contextlib import contextmanager

import pandas as pd

from controlplane.faults import FAULTS
from infra.contracts import ANALYZERS, GUARANTEES
from controlplane import commands
from controlplane.store import connect

LATENCY_GOAL_MS = 20
RECENT_DECISIONS = 5000


class BrokerDown(RuntimeError):
    """Kafka did not answer in time."""


def now_ms() -> int:
    return int(time.time() * 1000)


@contextmanager
def open_store(settings):
    """A short-lived store connection that waits at most `dashboard_store_timeout_ms` for a lock."""
    db = connect(settings.store_path, busy_timeout_ms=settings.dashboard_store_timeout_ms)
    try:
        yield db
    finally:
        db.conn.close()


def _frame(db, sql: str, args=()) -> pd.DataFrame:
    cursor = db.conn.execute(sql, list(args))
    columns = [c[0] for c in cursor.description]
    return pd.DataFrame(cursor.fetchall(), columns=columns)


def _time(ms: pd.Series) -> pd.Series:
    return pd.to_datetime(ms, unit="ms")


# --- Overview -----------------------------------------------------------------------------------

def rates(db, now: int | None = None, window_s: int = 10) -> dict:
    """Transactions/s into the fraud job, decisions/s and fraud rate over the last `window_s`."""
    now = now or now_ms()
    since = now - window_s * 1000
    n, fraud = db.conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(is_fraud), 0) FROM decisions WHERE decided_at > ?", [since]).fetchone()
    row = db.conn.execute(
        "SELECT AVG(input_rows_per_s), COUNT(*) FROM batch_progress WHERE ts > ? AND query = 'fraud'",
        [now - max(window_s, 30) * 1000]).fetchone()
    return {
        "transactions_per_s": float(row[0]) if row[1] else None,
        "decisions_per_s": n / window_s,
        "fraud_rate": (fraud / n) if n else None,
        "decisions": n,
        "window_s": window_s,
    }


def recent_latencies(db, limit: int = RECENT_DECISIONS) -> pd.DataFrame:
    """decided_at, latency_ms of the most recent decisions (decided_at − produced_at)."""
    return _frame(db, "SELECT decided_at, decided_at - produced_at AS latency_ms FROM decisions "
                      "WHERE decided_at IS NOT NULL AND produced_at IS NOT NULL "
                      "ORDER BY decided_at DESC LIMIT ?", [limit])


def latency_summary(latencies: pd.DataFrame) -> dict:
    """p50/p95/p99 of decision latency and the share within the 20 ms goal."""
    if latencies.empty:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "within_goal": None}
    ms = latencies["latency_ms"].astype(float)
    return {"n": int(ms.size), "p50": float(ms.quantile(0.50)), "p95": float(ms.quantile(0.95)),
            "p99": float(ms.quantile(0.99)), "within_goal": float((ms <= LATENCY_GOAL_MS).mean())}


def latency_series(latencies: pd.DataFrame, bucket_s: int = 5) -> pd.DataFrame:
    """Per time bucket: p50, p95, p99 latency and decisions per second."""
    if latencies.empty:
        return pd.DataFrame(columns=["time", "p50", "p95", "p99", "decisions_per_s"])
    df = latencies.assign(bucket=(latencies["decided_at"] // (bucket_s * 1000)) * bucket_s * 1000)
    grouped = df.groupby("bucket")["latency_ms"]
    out = pd.DataFrame({
        "p50": grouped.quantile(0.50), "p95": grouped.quantile(0.95), "p99": grouped.quantile(0.99),
        "decisions_per_s": grouped.size() / bucket_s,
    }).reset_index()
    out["time"] = _time(out["bucket"])
    return out.drop(columns="bucket").sort_values("time")


def job_status(db, now: int | None = None) -> pd.DataFrame:
    now = now or now_ms()
    df = _frame(db, "SELECT job, status, pid, restarts, last_batch, started_at, updated_at, detail "
                    "FROM job_status ORDER BY job LIMIT 50")
    if not df.empty:
        df["seen_s_ago"] = ((now - df["updated_at"].fillna(now)) / 1000).clip(lower=0).round(1)
        df["up_since"] = _time(df["started_at"])
        df = df.drop(columns=["started_at", "updated_at"])
    return df


def dead_letters(db) -> pd.DataFrame:
    return _frame(db, "SELECT reason, count, updated_at FROM dead_letters ORDER BY count DESC LIMIT 50")


# --- consumer lag ---------------------------------------------------------------------------------

def parse_offsets(raw: str | None) -> dict[str, dict[int, int]]:
    """Spark's end offsets as recorded in batch_progress -> {topic: {partition: offset}}.

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
    """Each query's last batch: {query: {"batch_id", "ts", "offsets": {topic: {partition: offset}}}}."""
    df = _frame(db, "SELECT b.query, b.batch_id, b.ts, b.end_offsets FROM batch_progress b "
                    "JOIN (SELECT query, MAX(ts) AS ts FROM batch_progress GROUP BY query) last "
                    "ON b.query = last.query AND b.ts = last.ts ORDER BY b.query LIMIT 100")
    return {r.query: {"batch_id": r.batch_id, "ts": r.ts, "offsets": parse_offsets(r.end_offsets)}
            for r in df.itertuples()}


def consumer_lag(end_offsets: dict[str, dict[int, int]], last_batches: dict[str, dict],
                 known_ends: bool = True) -> pd.DataFrame:
    """Per query and topic: Kafka's end offset, the offset the query's last batch reached, the lag.

    With `known_ends` False (the broker is down) only where each query got to: no end, no lag.
    """
    rows = []
    for query, batch in sorted(last_batches.items()):
        for topic, parts in sorted(batch["offsets"].items()):
            if not known_ends:
                rows.append({"query": query, "topic": topic, "processed": sum(parts.values()),
                             "last_batch": batch["batch_id"]})
                continue
            ends = end_offsets.get(topic)
            if ends is None:
                continue
            end = sum(ends.values())
            done = sum(parts.get(p, 0) for p in ends)
            rows.append({"query": query, "topic": topic, "kafka_end": end, "processed": done,
                         "lag": max(end - done, 0), "last_batch": batch["batch_id"]})
    columns = ["query", "topic", "kafka_end", "processed", "lag", "last_batch"]
    return pd.DataFrame(rows, columns=columns if known_ends else ["query", "topic", "processed", "last_batch"])


def kafka_end_offsets(bootstrap: str, topics: list[str], timeout_s: float = 2.0) -> dict[str, dict[int, int]]:
    """{topic: {partition: end offset}} straight from the broker; BrokerDown when it does not answer."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    from infra.broker import api_versions

    first = bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    if api_versions(host or "127.0.0.1", int(port or 9092), timeout=timeout_s) is None:
        raise BrokerDown(f"broker down: Kafka at {bootstrap} does not answer")
    try:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="cardstream-dashboard",
                                 enable_auto_commit=False, request_timeout_ms=int(timeout_s * 1500),
                                 bootstrap_timeout_ms=int(timeout_s * 1000))
    except KafkaError as exc:
        raise BrokerDown(f"broker down: {exc}") from None
    try:
        partitions = []
        for topic in topics:
            for p in sorted(consumer.partitions_for_topic(topic) or []):
                partitions.append(TopicPartition(topic, p))
        ends = consumer.end_offsets(partitions, timeout_ms=int(timeout_s * 1000)) if partitions else {}
    except KafkaError as exc:
        raise BrokerDown(f"broker down: {exc}") from None
    finally:
        consumer.close()
    out: dict[str, dict[int, int]] = {}
    for tp, off in ends.items():
        out.setdefault(tp.topic, {})[tp.partition] = int(off)
    return out


# --- Guarantees -----------------------------------------------------------------------------------

def latest_audit(db, job: str) -> pd.DataFrame:
    """The newest audit row per (guarantee, metric) of `job`."""
    return _frame(db, "SELECT a.* FROM audit a JOIN (SELECT guarantee, metric, MAX(ts) AS ts FROM audit "
                      "WHERE job = ? GROUP BY guarantee, metric) last ON a.guarantee = last.guarantee "
                      "AND a.metric = last.metric AND a.ts = last.ts WHERE a.job = ? "
                      "ORDER BY a.guarantee, a.metric", [job, job])


def audit_series(db, job: str, metric: str, now: int | None = None, minutes: int = 30) -> pd.DataFrame:
    """Audit rows of the last `minutes`, with error = observed − truth."""
    now = now or now_ms()
    df = _frame(db, "SELECT ts, guarantee, truth, observed, lost, duplicated FROM audit "
                    "WHERE job = ? AND metric = ? AND ts > ? ORDER BY ts LIMIT 20000",
                [job, metric, now - minutes * 60_000])
    df["error"] = df["observed"] - df["truth"]
    df["time"] = _time(df["ts"])
    return df


def fault_marks(db, now: int | None = None, minutes: int = 30) -> pd.DataFrame:
    """Faults injected in the last `minutes` (commands whose kind is a fault), for chart markers."""
    now = now or now_ms()
    marks = ",".join("?" for _ in FAULTS)
    df = _frame(db, f"SELECT id, kind, job, params, status, issued_at, started_at FROM commands "
                    f"WHERE kind IN ({marks}) AND issued_at > ? ORDER BY id LIMIT 500",
                [*FAULTS, now - minutes * 60_000])
    df["time"] = _time(df["started_at"].fillna(df["issued_at"]))
    return df


def replayed_batch(db, guarantee: str, now: int | None = None, minutes: int = 30) -> int | None:
    """The newest batch id that the guarantee's query ran more than once (a replay after a crash)."""
    now = now or now_ms()
    row = db.conn.execute(
        "SELECT batch_id FROM batch_progress WHERE query LIKE ? AND ts > ? GROUP BY query, batch_id "
        "HAVING COUNT(*) > 1 ORDER BY MAX(ts) DESC LIMIT 1", [f"%{guarantee}%", now - minutes * 60_000]).fetchone()
    return row[0] if row else None


def last_applied_batch(db, guarantee: str) -> int | None:
    row = db.conn.execute("SELECT MAX(batch_id) FROM usage_applied_batches WHERE guarantee = ?",
                          [guarantee]).fetchone()
    return row[0] if row and row[0] is not None else None


def _hms(ms) -> str:
    return pd.to_datetime(int(ms), unit="ms").strftime("%H:%M:%S")


def describe_guarantee(guarantee: str, rows: list[dict], replayed: int | None = None,
                       applied: int | None = None) -> str:
    """One plain sentence on what a guarantee just did, from its audit rows, newest first (pure).

    The newest change in lost or duplicated names the event (a replay adds duplicates, a restart
    from the latest offsets loses events); without one, the sentence says where the count stands.
    """
    if not rows:
        return f"{guarantee}: no audit yet — nothing counted against the truth so far."
    last = rows[0]
    total = (f"now {int(last['observed']):,} counted vs truth {int(last['truth']):,}: "
             f"{int(last['lost'] or 0):,} lost, {int(last['duplicated'] or 0):,} duplicated")
    for newer, older in zip(rows, rows[1:]):
        dup = int(newer["duplicated"] or 0) - int(older["duplicated"] or 0)
        lost = int(newer["lost"] or 0) - int(older["lost"] or 0)
        when = _hms(newer["ts"])
        if dup > 0:
            where = f"replayed batch {replayed}" if replayed is not None else "replayed a batch"
            return f"**{guarantee}** {where} at {when}: **+{dup:,} duplicates** ({total})."
        if lost > 0 and guarantee == "at-most-once":
            return (f"**{guarantee}** lost **{lost:,} events** at {when}, in flight or while down, "
                    f"and restarted from the latest offsets ({total}).")
        if lost > 0:  # it resumes from its checkpoint: a shortfall is input not yet read
            return (f"**{guarantee}** fell **{lost:,} events** behind at {when} and resumes from its "
                    f"checkpoint; the shortfall is input not read yet ({total}).")
    if guarantee == "exactly-once" and replayed is not None and last["observed"] == last["truth"]:
        return (f"**exactly-once** skipped replayed batch {replayed} (already applied): "
                f"count = truth = {int(last['truth']):,}.")
    step = f"last applied batch {applied}; " if applied is not None else ""
    if last["observed"] == last["truth"]:
        return f"**{guarantee}**: {step}count = truth = {int(last['truth']):,}."
    return f"**{guarantee}**: {step}no new loss or duplicate in the last audits ({total})."


def guarantee_stories(db, now: int | None = None, minutes: int = 30) -> dict[str, str]:
    now = now or now_ms()
    out = {}
    for g in GUARANTEES:
        rows = _frame(db, "SELECT ts, truth, observed, lost, duplicated FROM audit WHERE job = 'usage' "
                          "AND guarantee = ? AND metric = 'processed' AND ts > ? ORDER BY ts DESC LIMIT 1000",
                      [g, now - minutes * 60_000]).to_dict("records")
        out[g] = describe_guarantee(g, rows, replayed_batch(db, g, now, minutes), last_applied_batch(db, g))
    return out


def usage_counts(db) -> pd.DataFrame:
    return _frame(db, "SELECT guarantee, processed, fraud, updated_at FROM usage_counts ORDER BY guarantee")


# --- Faults ---------------------------------------------------------------------------------------

def command_log(db, limit: int = 50, job: str | None = None) -> pd.DataFrame:
    """Recent commands with their outcome and how long they took."""
    where, args = ("WHERE job = ?", [job]) if job else ("", [])
    df = _frame(db, f"SELECT id, kind, job, params, status, issued_at, started_at, done_at, result "
                    f"FROM commands {where} ORDER BY id DESC LIMIT ?", [*args, limit])
    if not df.empty:
        df["issued"] = _time(df["issued_at"])
        df["took_s"] = ((df["done_at"] - df["started_at"]) / 1000).round(2)
        df["params"] = df["params"].map(lambda p: ", ".join(f"{k}={v}" for k, v in json.loads(p or "{}").items()))
        df = df[["id", "issued", "kind", "job", "params", "status", "took_s", "result"]]
    return df


def recoveries(db, limit: int = 50) -> pd.DataFrame:
    df = _frame(db, "SELECT id, job, fault, killed_at, recovered_at, seconds FROM recoveries "
                    "ORDER BY id DESC LIMIT ?", [limit])
    if not df.empty:
        df["killed"] = _time(df["killed_at"])
    return df


def rejected_writes(db, limit: int = 20) -> pd.DataFrame:
    return _frame(db, "SELECT id, job, epoch, current_epoch, ts, what FROM rejected_writes "
                      "ORDER BY id DESC LIMIT ?", [limit])


def rejected_total(db) -> int:
    return db.conn.execute("SELECT COUNT(*) FROM rejected_writes").fetchone()[0]


def issue(db, kind: str, job: str | None, **params) -> int:
    """Add one command for the supervisor or the simulator; the only write the dashboard makes."""
    return commands.issue(db, kind, job, **params)


# --- Windows --------------------------------------------------------------------------------------

def windows(db, kind: str, now: int | None = None, minutes: int = 30, limit: int = 2000) -> pd.DataFrame:
    now = now or now_ms()
    df = _frame(db, "SELECT kind, key, window_start, window_end, processed, fraud, updated_at FROM windows "
                    "WHERE kind = ? AND window_start > ? ORDER BY window_start DESC LIMIT ?",
                [kind, now - minutes * 60_000, limit])
    df["start"] = _time(df["window_start"])
    df["end"] = _time(df["window_end"])
    df["length_s"] = (df["window_end"] - df["window_start"]) / 1000
    return df


def window_kinds(db) -> list[str]:
    return [r[0] for r in db.conn.execute("SELECT DISTINCT kind FROM windows LIMIT 20")]


def watermarks(db, now: int | None = None) -> pd.DataFrame:
    """Each query's newest watermark and how far it trails the wall clock.

    Two sources: Spark's own event-time watermark per query (batch_progress, an ISO string), and
    the windows query's watermark kept in the store (usage_watermarks, ms) so it survives restarts.
    """
    now = now or now_ms()
    spark = _frame(db, "SELECT b.query, b.watermark FROM batch_progress b "
                       "JOIN (SELECT query, MAX(ts) AS ts FROM batch_progress WHERE watermark IS NOT NULL "
                       "AND watermark != '' GROUP BY query) last ON b.query = last.query AND b.ts = last.ts "
                       "ORDER BY b.query LIMIT 100")
    stored = _frame(db, "SELECT name AS query, watermark, max_event_time FROM usage_watermarks "
                        "WHERE watermark IS NOT NULL ORDER BY name LIMIT 20")
    wm_ms = list(pd.to_datetime(spark["watermark"], utc=True, errors="coerce").astype("int64") // 1_000_000) \
        if not spark.empty else []
    rows = [{"query": q, "watermark_ms": w} for q, w in zip(spark["query"], wm_ms) if w > 0]
    rows += [{"query": r.query, "watermark_ms": int(r.watermark)} for r in stored.itertuples()
             if r.query not in {x["query"] for x in rows}]
    df = pd.DataFrame(rows, columns=["query", "watermark_ms"]).astype({"watermark_ms": "int64"})
    df["watermark"] = _time(df["watermark_ms"])
    df["behind_s"] = ((now - df["watermark_ms"]) / 1000).round(1)
    return df.sort_values("query").reset_index(drop=True)


def late_events(db) -> pd.DataFrame:
    """Late events dropped, per window kind (the usage job's count) — totals."""
    return _frame(db, "SELECT kind, SUM(count) AS dropped, COUNT(*) AS windows FROM late_events "
                      "GROUP BY kind ORDER BY kind LIMIT 20")


def late_series(db, now: int | None = None, minutes: int = 30) -> pd.DataFrame:
    now = now or now_ms()
    df = _frame(db, "SELECT kind, window_start, count FROM late_events WHERE window_start > ? "
                    "ORDER BY window_start LIMIT 5000", [now - minutes * 60_000])
    df["start"] = _time(df["window_start"])
    return df


def dropped_by_watermark(db, now: int | None = None, minutes: int = 30) -> pd.DataFrame:
    """Rows Spark's stateful operators dropped as too late, per query, over the last `minutes`."""
    now = now or now_ms()
    return _frame(db, "SELECT query, SUM(state_rows_dropped_late) AS dropped FROM batch_progress "
                      "WHERE ts > ? GROUP BY query ORDER BY query LIMIT 100", [now - minutes * 60_000])


# --- Checkpoints and state ------------------------------------------------------------------------

def batches(db, now: int | None = None, minutes: int = 15, limit: int = 5000) -> pd.DataFrame:
    """Batch history of every query: durations, commit (checkpoint) time, state rows and bytes."""
    now = now or now_ms()
    df = _frame(db, "SELECT query, batch_id, ts, num_input_rows, input_rows_per_s, processed_rows_per_s, "
                    "duration_ms, trigger_ms, commit_ms, state_rows, state_memory_bytes, "
                    "state_rows_dropped_late, checkpoint FROM batch_progress WHERE ts > ? "
                    "ORDER BY ts DESC LIMIT ?", [now - minutes * 60_000, limit])
    df["time"] = _time(df["ts"])
    return df.sort_values("ts")


def state_now(batch_df: pd.DataFrame) -> pd.DataFrame:
    """Per query: the newest batch's state rows and bytes, and its median commit time."""
    if batch_df.empty:
        return pd.DataFrame(columns=["query", "last_batch", "state_rows", "state_memory_bytes",
                                     "median_commit_ms", "median_duration_ms", "checkpoint"])
    last = batch_df.sort_values("ts").groupby("query").tail(1).set_index("query")
    med = batch_df.groupby("query")[["commit_ms", "duration_ms"]].median()
    return pd.DataFrame({
        "last_batch": last["batch_id"], "state_rows": last["state_rows"],
        "state_memory_bytes": last["state_memory_bytes"],
        "median_commit_ms": med["commit_ms"], "median_duration_ms": med["duration_ms"],
        "checkpoint": last["checkpoint"],
    }).reset_index()


def restores(db, now: int | None = None, minutes: int = 60) -> pd.DataFrame:
    """Batches a query ran more than once: a restart restored its checkpoint and replayed them."""
    now = now or now_ms()
    df = _frame(db, "SELECT query, batch_id, COUNT(*) AS runs, MIN(ts) AS first_ts, MAX(ts) AS last_ts "
                    "FROM batch_progress WHERE ts > ? GROUP BY query, batch_id HAVING COUNT(*) > 1 "
                    "ORDER BY last_ts DESC LIMIT 50", [now - minutes * 60_000])
    if not df.empty:
        df["replayed_at"] = _time(df["last_ts"])
        df = df.drop(columns=["first_ts", "last_ts"])
    return df


# --- Fraud ----------------------------------------------------------------------------------------

SCORE_COLUMNS = [f"score_{a}" for a in ANALYZERS]


def flagged(db, limit: int = 50) -> pd.DataFrame:
    """The most recent transactions flagged as fraud, with each analyzer's score."""
    df = _frame(db, f"SELECT txn_id, card_id, merchant_id, amount_cents, event_time, decided_at, "
                    f"{', '.join(SCORE_COLUMNS)}, score, decided_at - produced_at AS latency_ms "
                    f"FROM decisions WHERE is_fraud = 1 ORDER BY decided_at DESC LIMIT ?", [limit])
    if not df.empty:
        df["amount"] = df["amount_cents"] / 100
        df["decided"] = _time(df["decided_at"])
    return df


def ratio(truth, observed) -> float | None:
    """Precision or recall from an audit row.

    Either the ratio itself sits in `observed` (0..1, truth 0, 1 or empty), or the row holds counts:
    true positives in `observed` over flagged (precision) or labelled fraud (recall) in `truth`.
    """
    if observed is None or pd.isna(observed):
        return None
    if 0 <= observed <= 1 and (truth is None or pd.isna(truth) or truth in (0, 1)):
        return float(observed)
    return float(observed) / truth if truth else None


def fraud_quality(db) -> dict:
    """Latest precision and recall of the fraud job against the labels, and its truth counts."""
    latest = latest_audit(db, "fraud")
    out = {"precision": None, "recall": None, "processed_truth": None, "processed_observed": None,
           "fraud_truth": None, "fraud_observed": None, "ts": None}
    for r in latest.to_dict("records"):
        m = r["metric"]
        if m in ("precision", "recall"):
            out[m] = ratio(r["truth"], r["observed"])
        elif m in ("processed", "decisions", "fraud"):  # the auditor calls the fraud job's count "decisions"
            key = "fraud" if m == "fraud" else "processed"
            out[f"{key}_truth"], out[f"{key}_observed"] = r["truth"], r["observed"]
        out["ts"] = max(out["ts"] or 0, r["ts"])
    return out


def quality_series(db, now: int | None = None, minutes: int = 30) -> pd.DataFrame:
    now = now or now_ms()
    df = _frame(db, "SELECT ts, metric, truth, observed FROM audit WHERE job = 'fraud' "
                    "AND metric IN ('precision', 'recall') AND ts > ? ORDER BY ts LIMIT 5000",
                [now - minutes * 60_000])
    df["value"] = [ratio(t, o) for t, o in zip(df["truth"], df["observed"])]
    df["value"] = df["value"].astype(float)
    df["time"] = _time(df["ts"])
    return df


# --- Controls -------------------------------------------------------------------------------------

SIMULATOR_KINDS = ("pause", "resume", "set-rate", "set-fraud-rate", "set-late-rate")


def simulator_settings(db) -> dict:
    """What the dashboard last asked the simulator for, per command kind, and whether it took."""
    out = {}
    for kind in SIMULATOR_KINDS:
        row = db.conn.execute("SELECT id, params, status, issued_at, result FROM commands "
                              "WHERE job = 'simulator' AND kind = ? ORDER BY id DESC LIMIT 1", [kind]).fetchone()
        if row:
            out[kind] = {"id": row[0], "params": json.loads(row[1] or "{}"), "status": row[2],
                         "issued_at": row[3], "result": row[4]}
    paused = None
    for kind in ("pause", "resume"):
        if kind in out and (paused is None or out[kind]["id"] > paused[1]):
            paused = (kind == "pause", out[kind]["id"])
    out["paused"] = paused[0] if paused else False
    return out
