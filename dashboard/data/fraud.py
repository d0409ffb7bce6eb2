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
    """The most recent transactions flagged as fraud, with each analyzer's score."""
    df = frame(db, f"SELECT txn_id, card_id, merchant_id, amount_cents, event_time, decided_at, "
                   f"{', '.join(SCORE_COLUMNS)}, score, decided_at - produced_at AS latency_ms "
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
