"""What the benches measured: end-to-end latency per path (`bench latency`), fraud quality per
pattern on the evaluation set (`bench quality`) and on the fraud-detection handbook's test week
(`bench handbook`), read from the store tables they write.

Why a module of its own: these figures are measurements of a run, not of the live stream, and
both the Overview and the Fraud page show them; nothing here estimates, it only reads what a
bench recorded (with when, so a page can say how old the figure is).
"""
from __future__ import annotations

import json

import pandas as pd

from dashboard.data.store import frame, to_time

PATHS = {"microbatch": "stateful (micro-batch) → decisions", "realtime": "real-time → decisions-rt"}
QUALITY_COLUMNS = ["pattern", "kind", "transactions", "flagged", "precision", "recall", "average_precision",
                   "flagged_share"]


def latency_runs(db) -> pd.DataFrame:
    """The newest `bench latency` run per path and rate: p50/p95/p99/max (ms), undecided, when."""
    df = frame(db, "SELECT l.* FROM latency_runs l JOIN (SELECT mode, rate, MAX(ts) AS ts FROM latency_runs "
                   "GROUP BY mode, rate) last ON l.mode = last.mode AND l.rate = last.rate AND l.ts = last.ts "
                   "ORDER BY l.mode, l.rate LIMIT 50")
    if not df.empty:
        df["path"] = df["mode"].map(lambda m: PATHS.get(m, m))
        df["measured_at"] = to_time(df["ts"])
    return df


def latest_quality(db) -> tuple[pd.DataFrame, dict | None]:
    """The newest `bench quality` run: its rows (fraud patterns first, `all` last) and
    {run_id, ts, seed, threshold, when}; (empty frame, None) before any run."""
    run = db.conn.execute("SELECT run_id, ts, seed, threshold FROM quality ORDER BY ts DESC LIMIT 1").fetchone()
    if run is None:
        return pd.DataFrame(columns=QUALITY_COLUMNS), None
    df = frame(db, f"SELECT {', '.join(QUALITY_COLUMNS)} FROM quality WHERE run_id = ?", [run[0]])
    order = {"fraud": 0, "legitimate": 1, "all": 2}
    df = df.sort_values(["kind", "pattern"], key=lambda c: c.map(order) if c.name == "kind" else c)
    when = pd.to_datetime(int(run[1]), unit="ms").strftime("%Y-%m-%d %H:%M UTC")
    return df.reset_index(drop=True), {"run_id": run[0], "ts": run[1], "seed": run[2], "threshold": run[3],
                                       "when": when}


HANDBOOK_METRICS = {"auc_roc": "AUC ROC", "average_precision": "Average precision",
                    "card_precision_at_100": "Card precision@100"}


def _when(ts) -> str:
    return pd.to_datetime(int(ts), unit="ms").strftime("%Y-%m-%d %H:%M UTC")


def latest_handbook(db) -> tuple[pd.DataFrame, dict | None]:
    """The newest `bench handbook` run (`handbook_runs`): one row per aggregator it measured (the
    rules first, then the learned model): model, model_version, the figures (HANDBOOK_METRICS),
    test_transactions, test_frauds, card_precision_per_day (parsed); and {run_id, ts, when,
    protocol (parsed: train, delay, test, their days)}; (empty frame, None) before any run."""
    columns = ["model", "model_version", *HANDBOOK_METRICS, "test_transactions", "test_frauds",
               "card_precision_per_day"]
    run = db.conn.execute("SELECT run_id, ts, protocol FROM handbook_runs ORDER BY ts DESC LIMIT 1").fetchone()
    if run is None:
        return pd.DataFrame(columns=columns), None
    df = frame(db, "SELECT model, model_version, auc_roc, average_precision, card_precision_at_100, "
                   "test_transactions, test_frauds, card_precision_per_day FROM handbook_runs WHERE run_id = ? "
                   "ORDER BY coalesce(model_version, 0), model LIMIT 20", [run[0]])
    df["card_precision_per_day"] = [json.loads(v) if v else [] for v in df["card_precision_per_day"]]
    try:
        protocol = json.loads(run[2]) if run[2] else {}
    except ValueError:
        protocol = {}
    return df, {"run_id": run[0], "ts": run[1], "when": _when(run[1]), "protocol": protocol}


def evaluation_headline(db) -> dict | None:
    """The newest `bench quality` run's figures over every fraud pattern together (its `all` row):
    {transactions, flagged, precision, recall, average_precision, seed, threshold, when}; None
    before any run."""
    row = db.conn.execute("SELECT run_id, ts, seed, threshold, transactions, flagged, precision, recall, "
                          "average_precision FROM quality WHERE pattern = 'all' ORDER BY ts DESC LIMIT 1").fetchone()
    if row is None:
        return None
    keys = ["run_id", "ts", "seed", "threshold", "transactions", "flagged", "precision", "recall", "average_precision"]
    out = dict(zip(keys, row))
    out["when"] = _when(out["ts"])
    return out
