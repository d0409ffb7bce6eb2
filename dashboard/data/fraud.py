"""Fraud: what the detector flagged and each analyzer's score (the store's decisions), and how
right and how complete it is (the audit's fraud rows: decisions vs truth, the decisions topic,
precision and recall against the simulator's labels)."""
from __future__ import annotations

import pandas as pd

from dashboard.data.store import frame, scalar, since, to_time
from infra.contracts import ANALYZERS

JOB = "fraud"
SCORE_COLUMNS = [f"score_{a}" for a in ANALYZERS]


def flagged(db, limit: int = 50) -> pd.DataFrame:
    """The most recent transactions flagged as fraud, with each analyzer's score, the model version
    that decided and its explanation (JSON: the three largest contributions to the score)."""
    df = frame(db, f"SELECT txn_id, card_id, merchant_id, amount_cents, event_time, decided_at, "
                   f"{', '.join(SCORE_COLUMNS)}, score, decided_at - produced_at AS latency_ms, "
                   f"coalesce(model_version, 0) AS model_version, explanation "
                   f"FROM decisions WHERE is_fraud = 1 ORDER BY decided_at DESC LIMIT ?", [limit])
    df["amount"] = df["amount_cents"] / 100
    df["decided"] = to_time(df["decided_at"])
    return df


def flagged_total(db) -> int:
    return int(scalar(db, "SELECT COUNT(*) FROM decisions WHERE is_fraud = 1") or 0)


def _value(v):
    return None if v is None or pd.isna(v) else v


def quality(db) -> dict:
    """The fraud job's newest audit: truth (valid transactions up to its committed offsets), decided
    (in the store), lost, the decisions topic (distinct ids, extra records), lag, precision, recall."""
    rows = frame(db, "SELECT ts, metric, truth, observed, lost, duplicated, lag_records, lag_seconds "
                     "FROM audit a WHERE job = ? AND ts = (SELECT MAX(ts) FROM audit b WHERE b.job = a.job "
                     "AND b.metric = a.metric)", [JOB]).set_index("metric")
    out = {"ts": int(rows["ts"].max()) if not rows.empty else None}

    def get(metric, column):
        return _value(rows.loc[metric, column]) if metric in rows.index else None

    out.update(truth=get("decisions", "truth"), decided=get("decisions", "observed"), lost=get("decisions", "lost"),
               lag_records=get("decisions", "lag_records"), lag_seconds=get("decisions", "lag_seconds"),
               topic=get("topic", "observed"), topic_lost=get("topic", "lost"),
               topic_duplicated=get("topic", "duplicated"),
               precision=get("precision", "observed"), recall=get("recall", "observed"))
    return out


def quality_series(db, now: int | None = None, minutes: float = 30) -> pd.DataFrame:
    """Precision and recall over time (the audit keeps the ratio itself in `observed`)."""
    df = frame(db, "SELECT ts, metric, observed AS value FROM audit WHERE job = ? "
                   "AND metric IN ('precision', 'recall') AND ts > ? ORDER BY ts LIMIT 5000",
               [JOB, since(now, minutes)])
    df["value"] = df["value"].astype(float)
    df["time"] = to_time(df["ts"])
    return df


# --- the two paths: real-time (decisions-rt) and stateful (decisions), from the live auditor -------

PATHS = ("real-time", "stateful")
RT_FAULTS = ("crash", "zombie", "set-fraud-guarantee")   # what kills or restarts the real-time query


def paths_series(db, now: int | None = None, minutes: float = 30) -> pd.DataFrame:
    """Per path and 5 s slice of arrival time (the auditor's `fraud_paths`): transactions, decided,
    undecided (None while the slice may still be decided), duplicated, latency p50/p99/max."""
    df = frame(db, "SELECT path, bucket, transactions, decided, undecided, duplicated, filled, p50_ms, p99_ms, "
                   "max_ms, alerts, confirmed FROM fraud_paths WHERE bucket > ? ORDER BY bucket, path LIMIT 5000",
               [since(now, minutes)])
    df["time"] = to_time(df["bucket"])
    return df


def paths_totals(series: pd.DataFrame) -> dict:
    """{path: decided, undecided (settled slices), duplicated, filled, p99_ms (newest settled slice
    with decisions), arrived, alerts and confirmed (real-time: its fraud alerts the stateful path
    has decided, and of those the ones it flagged too; None when not known)} over the series; {}
    for a path with no row."""
    out = {}
    for path in PATHS:
        part = series[series["path"] == path]
        if part.empty:
            continue
        settled = part[part["undecided"].notna()]
        timed = settled[settled["p99_ms"].notna()]
        out[path] = {"arrived": int(part["transactions"].sum()), "decided": int(part["decided"].sum()),
                     "undecided": int(settled["undecided"].sum()), "duplicated": int(part["duplicated"].sum()),
                     "filled": int(pd.to_numeric(settled["filled"]).fillna(0).sum()),
                     "p99_ms": _value(timed["p99_ms"].iloc[-1]) if not timed.empty else None}
        for key in ("alerts", "confirmed"):
            known = part[key].dropna()
            out[path][key] = int(known.sum()) if not known.empty else None
    return out


def rt_runs(db, limit: int = 20) -> pd.DataFrame:
    """The real-time query's starts, newest first: when, under which guarantee, resumed or not."""
    df = frame(db, "SELECT started_at, guarantee, resumed, epoch, pid FROM fraud_rt_runs ORDER BY started_at DESC "
                   "LIMIT ?", [limit])
    df["started"] = to_time(df["started_at"])
    return df


def rt_gaps(db, now: int | None = None, minutes: float = 30) -> list[dict]:
    """What each kill or restart of the fraud job did to its real-time path (the auditor's
    `fraud_rt_gaps`), newest first."""
    df = frame(db, "SELECT g.*, c.job FROM fraud_rt_gaps g LEFT JOIN commands c ON c.id = g.command_id "
                   "WHERE g.killed_at > ? ORDER BY g.killed_at DESC LIMIT 50", [since(now, minutes)])
    return [{k: _value(v) for k, v in row.items()} for row in df.to_dict("records")]


def rt_fault_marks(db, now: int | None = None, minutes: float = 30) -> pd.DataFrame:
    """The commands that killed or restarted the fraud job (crash, zombie, a guarantee change) and
    broker outages, to mark on the paths' charts."""
    marks = ",".join("?" for _ in RT_FAULTS)
    df = frame(db, f"SELECT id, kind, job, params, status, issued_at, started_at FROM commands "
                   f"WHERE ((kind IN ({marks}) AND job = ?) OR kind = 'broker-down') AND issued_at > ? "
                   f"ORDER BY id LIMIT 500", [*RT_FAULTS, JOB, since(now, minutes)])
    df["time"] = to_time(df["started_at"].fillna(df["issued_at"]))
    return df


# --- the real-time path's decisions (decisions-rt: in Kafka only) --------------------------------

RT_ROWS = 2_000  # the newest real-time decisions the page reads


def rt_decision(record) -> dict | None:
    """A `decisions-rt` record's JSON (as the real-time path writes it: a null field is absent),
    or None for one that is not a decision."""
    import json

    value = json.loads(record.value)
    return value if isinstance(value, dict) and "txn_id" in value else None


def rt_frame(records: list[dict]) -> pd.DataFrame:
    """The real-time decisions read (one per transaction: its newest, a resend counted once),
    newest first: txn_id, card_id, amount, decided, score, is_fraud, model_version, explanation,
    model_why (None when the model decided, or no model was in use)."""
    columns = ["txn_id", "card_id", "amount_cents", "decided_at", "score", "is_fraud", "model_version",
               "explanation", "model_why"]
    df = pd.DataFrame([{c: r.get(c) for c in columns} for r in records], columns=columns)
    df = df.drop_duplicates("txn_id", keep="last")
    df["model_version"] = pd.to_numeric(df["model_version"], errors="coerce").fillna(0).astype(int)
    df["is_fraud"] = df["is_fraud"].fillna(False).astype(bool)
    df["amount"] = df["amount_cents"] / 100
    df["decided"] = to_time(df["decided_at"])
    return df.sort_values("decided_at", ascending=False, kind="stable").reset_index(drop=True)


def rt_deciders(df: pd.DataFrame) -> dict:
    """Who made the real-time decisions of `df`: {decisions, model: {version: count}, rules, why:
    {reason: count}}; a reason is the decision's `model_why` with its per-payment details as "…"
    (realtime.why_kind), the rules' decisions without one counted under None (no model in use)."""
    from pipelines.fraud.realtime import why_kind

    learned = df[df["model_version"] > 0]
    rules = df[df["model_version"] <= 0]
    why: dict = {}
    for sentence in rules["model_why"]:
        kind = why_kind(sentence) if isinstance(sentence, str) and sentence else None
        why[kind] = why.get(kind, 0) + 1
    return {"decisions": len(df), "model": {int(v): int(n) for v, n in learned["model_version"].value_counts().sort_index().items()},
            "rules": len(rules), "why": dict(sorted(why.items(), key=lambda kv: -kv[1]))}
