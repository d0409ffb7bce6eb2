"""The SQL mirrors agree with the plain functions: the real-time path's analyzers and the aggregator.

The real-time query may not run Python (Spark 4.2's real-time allowlist), so it scores with SQL
expressions; here both are evaluated on the same cases on the shared SparkSession.
"""
from __future__ import annotations

import pytest

from infra.contracts import ANALYZERS
from pipelines.fraud.aggregator import aggregate, aggregate_columns
from pipelines.fraud.analyzers import score_transaction
from pipelines.fraud.state import profile_to_row

T0 = 1_700_000_000_000
PARIS, NEW_YORK, LYON = (48.8566, 2.3522), (40.7128, -74.0060), (45.764, 4.8357)


def txn(amount, where, t):
    return {"amount_cents": amount, "lat": where[0], "lon": where[1], "event_time": t}


def cases():
    """(profile after some history, next transaction) pairs covering each analyzer's ramps."""
    history = [txn(2_000 + 150 * i, PARIS, T0 + i * 600_000) for i in range(5)]
    burst = [txn(150, PARIS, T0 + 3_000_000 + i * 2_000) for i in range(4)]
    nexts = [txn(2_100, PARIS, T0 + 3_100_000), txn(9_000, PARIS, T0 + 3_100_000),
             txn(60_000, PARIS, T0 + 3_100_000), txn(2_000, NEW_YORK, T0 + 2_700_000 + 30 * 60_000),
             txn(2_000, LYON, T0 + 2_400_000 + 50 * 60_000), txn(2_000, LYON, T0 + 2_400_000 + 30 * 60_000),
             txn(150, PARIS, T0 + 3_009_000)]
    out = []
    for past in (history, history + burst):
        profile = None
        for h in past:
            _, profile = score_transaction(profile, h)
        out += [(profile, n) for n in nexts]
    return out


def test_realtime_sql_scores_match_the_python_analyzers(spark):
    from pipelines.fraud.realtime import score_columns

    rows, expected = [], []
    for i, (profile, n) in enumerate(cases()):
        p = profile_to_row(profile)
        rows.append((i, n["amount_cents"], n["lat"], n["lon"], n["event_time"], *p[:6]))
        scores, _ = score_transaction(profile, n)
        expected.append(scores)
    df = spark.createDataFrame(rows, "i int, amount_cents long, lat double, lon double, event_time long, "
                                     "p_count long, p_mean double, p_lat double, p_lon double, p_time long, "
                                     "p_times string")
    cols = score_columns()
    got = {r["i"]: r for r in df.select("i", *[cols[n].alias(n) for n in ANALYZERS]).collect()}
    for i, scores in enumerate(expected):
        for name in ANALYZERS:
            assert got[i][name] == pytest.approx(scores[name], abs=1e-9), (i, name)
    assert any(s["proximity"] == 1.0 for s in expected) and any(s["velocity"] == 1.0 for s in expected)
    assert any(0 < s["avg_ticket"] < 1 for s in expected)


def test_aggregator_sql_matches_python(spark):
    grid = [(a, b, c) for a in (0.0, 0.3, 0.69, 1.0) for b in (0.0, 0.5, 0.9) for c in (0.0, 0.4)]
    df = spark.createDataFrame(grid, ", ".join(f"score_{n} double" for n in ANALYZERS))
    score, is_fraud = aggregate_columns(0.7)
    for row in df.select("*", score.alias("score"), is_fraud.alias("is_fraud")).collect():
        want, flag = aggregate({n: row[f"score_{n}"] for n in ANALYZERS}, 0.7)
        assert row["score"] == pytest.approx(want) and row["is_fraud"] == flag
