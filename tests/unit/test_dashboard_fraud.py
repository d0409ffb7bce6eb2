"""The Fraud page's queries: flagged transactions with their scores, the fraud job's audit."""
from __future__ import annotations

import pytest

from dashboard.data import fraud as data
from tests.harness.dashboard_seed import NOW, world  # noqa: F401 - a fixture


def test_flagged(world):
    db, _, _ = world
    flagged = data.flagged(db, 10)
    assert len(flagged) == 10 and flagged["decided_at"].is_monotonic_decreasing
    assert (flagged["score_avg_ticket"] >= 0.7).all() and (flagged["amount"] > 0).all()
    assert data.flagged_total(db) == int(db.conn.execute("SELECT COUNT(*) FROM decisions WHERE is_fraud = 1").fetchone()[0])


def test_quality_is_the_fraud_job_s_newest_audit(world):
    db, seeded, _ = world
    q = data.quality(db)
    f = seeded.fraud
    assert q["ts"] == NOW and (q["truth"], q["decided"], q["lost"]) == (f["truth"], f["observed"], 0)
    assert q["topic"] == f["topic"] and q["topic_duplicated"] == 0 and q["lag_records"] == f["lag_records"]
    assert q["precision"] == pytest.approx(f["precision"]) and q["recall"] == pytest.approx(f["recall"])
    series = data.quality_series(db, NOW)
    assert set(series["metric"]) == {"precision", "recall"} and series["value"].between(0, 1).all()


def test_empty_store(store):
    q = data.quality(store)
    assert q["ts"] is None and q["precision"] is None and q["decided"] is None
    assert data.flagged(store).empty and data.quality_series(store, NOW).empty and data.flagged_total(store) == 0
