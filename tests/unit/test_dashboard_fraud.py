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


def test_who_made_the_real_time_decisions_is_counted_from_them():
    """Issue 35 item 1: the newest decisions-rt records (as the path writes them: a null field
    absent; a resend counted once) -> who decided, the rules' reasons folded, in one sentence."""
    from dashboard.views import text
    from tests.harness.append_times import transaction_doc
    from tests.harness.dashboard_seed import rt_decision

    records = [rt_decision(transaction_doc(f"tx-0-{i}", NOW), i, NOW + i, 2, 0.4) for i in range(20)]
    records.append(dict(records[1]))  # a resend (at-least-once after a restart)
    records.append({"txn_id": "tx-1-0", "model_version": 0, "is_fraud": False, "decided_at": NOW})  # no model in use
    df = data.rt_frame(records)
    assert len(df) == 21 and df["decided_at"].is_monotonic_decreasing
    who = data.rt_deciders(df)
    kind = "terminal … has no features from the stateful path yet: decided with the rules (model 0)"
    assert who == {"decisions": 21, "model": {2: 17}, "rules": 4, "why": {kind: 3, None: 1}}  # tx-0-0, 9, 18 at m-0
    said = text.rt_deciders(who, "decisions-rt")
    assert "21 real-time decisions in `decisions-rt`: 17 by model 2, 4 by the rules (81.0 % by a learned model)" in said
    assert f"3 — {kind}" in said and "1 — no model in use" in said
