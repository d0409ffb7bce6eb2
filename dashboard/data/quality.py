"""What the benches measured: end-to-end latency per path (`bench latency`) and fraud quality per
pattern on the evaluation set (`bench quality`), read from the store tables they write.

Why a module of its own: these figures are measurements of a run, not of the live stream, and
both the Overview and the Fraud page show them; nothing here estimates, it only reads what a
bench recorded (with when, so a page can say how old the figure is).
"""
from __future__ import annotations

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
