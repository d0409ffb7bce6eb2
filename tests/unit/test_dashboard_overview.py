"""The Overview page's queries on a seeded store: rates, latency, the jobs, each query's lag."""
from __future__ import annotations

import json

import pytest

from dashboard.data import overview as data
from infra.contracts import GUARANTEES
from controlplane import fencing
from tests.harness.dashboard_seed import NOW, RATE, seed_realtime, world  # noqa: F401 - a fixture


def seeded_pairs(db, limit: int = data.RECENT_DECISIONS) -> list[tuple[int, int]]:
    """The seeded decisions' (produced_at, decided_at), standing in for the (transaction appended,
    decision appended) pairs the page reads from Kafka (tests/kafka/test_overview_rt_latency.py)."""
    return db.conn.execute("SELECT produced_at, decided_at FROM decisions ORDER BY decided_at DESC LIMIT ?",
                           [limit]).fetchall()


def test_rates_and_latency(world):
    db, seeded, _ = world
    r = data.rates(db, "transactions", NOW)
    assert r["transactions_per_s"] == pytest.approx(RATE, abs=1)  # Spark's inputRowsPerSecond of the transactions
    assert r["decisions_per_s"] == pytest.approx(RATE, abs=1)    # decisions in the store, last 10 s
    assert 0 < r["fraud_rate"] < 0.05
    lat = data.latency_frame(seeded_pairs(db))
    summary = data.latency_summary(lat)
    assert summary["n"] == data.RECENT_DECISIONS and 6 <= summary["p50"] <= 14 and summary["p99"] > summary["p50"]
    assert summary["within_goal"] == pytest.approx(0.99, abs=0.002)
    series = data.latency_series(lat, bucket_s=5)
    spans = data.RECENT_DECISIONS / RATE / 5                           # 5 s buckets over the decisions read
    assert spans <= len(series) <= spans + 2 and (series["p99"] >= series["p50"]).all()
    assert data.latency_summary(lat.head(0))["p50"] is None


def test_no_input_rate_without_a_recent_fraud_batch(world):
    db, _, _ = world
    assert data.rates(db, "transactions", NOW + 3_600_000)["transactions_per_s"] is None


def test_job_status(world):
    db, seeded, _ = world
    jobs = data.job_status(db, NOW).set_index("job")
    assert list(jobs.index) == ["fraud", "fraud-standby", "simulator", "usage", "usage-standby"]
    assert jobs.loc["fraud-standby", "status"] == "ready"
    assert jobs.loc["usage", "restarts"] == 1 and jobs.loc["usage", "started_at"] == seeded.restarted_at
    assert jobs.loc["fraud", "seen_s_ago"] == pytest.approx(0.4)


@pytest.mark.parametrize("raw,expected", [
    (json.dumps([json.dumps({"t": {"0": 5, "1": 7}})]), {"t": {0: 5, 1: 7}}),   # as metrics.py records it
    (json.dumps([{"t": {"0": 5}}, {"u": {"2": 1}}]), {"t": {0: 5}, "u": {2: 1}}),
    (json.dumps({"t": {"0": 5}}), {"t": {0: 5}}),
    ("[null]", {}), ("not json", {}), (None, {}), (json.dumps(["{bad"]), {}),
])
def test_parse_offsets(raw, expected):
    assert data.parse_offsets(raw) == expected


def test_consumer_lag(world):
    db, seeded, _ = world
    last = data.last_batch_offsets(db)
    assert set(last) == {"fraud", "usage-windows", *(f"usage-{g}" for g in GUARANTEES)}
    assert data.lag_topics(last) == ["decisions", "transactions"]
    lag = data.consumer_lag(seeded.topic_end, last).set_index("query")
    # at-least-once's last batch is still running: it is behind by the records since its last commit
    behind = seeded.final["at-least-once"]["lag_records"]
    assert lag.loc["usage-at-least-once", "lag"] == behind
    assert lag.loc["usage-exactly-once", "lag"] == seeded.final["exactly-once"]["lag_records"]
    assert lag.loc["fraud", "kafka_end"] == sum(seeded.topic_end["transactions"].values())
    assert lag.loc["fraud", "lag"] == seeded.fraud["lag_records"]
    unknown = data.consumer_lag(None, last)  # the broker is down: where each query got to, no lag
    assert unknown["lag"].isna().all() and unknown["processed"].notna().all() and len(unknown) == 5
    assert data.consumer_lag({"other": {0: 5}}, last).empty


def test_empty_store(store):
    assert data.rates(store, "transactions", NOW)["fraud_rate"] is None and data.rates(store, "transactions", NOW)["transactions_per_s"] is None
    assert data.latency_series(data.latency_frame(seeded_pairs(store))).empty
    assert data.job_status(store, NOW).empty and data.last_batch_offsets(store) == {}


def test_the_real_time_path_runs_now_only_when_the_lease_holder_started_it(store):
    """The Overview's tiles are the real-time path's while the fraud job's current instance runs it."""
    assert not data.rt_running(store)
    epoch = fencing.take_lease(store, "fraud")
    assert not data.rt_running(store)  # a micro-batch instance
    seed_realtime(store, NOW - 60_000, epoch=epoch)
    assert data.rt_running(store)
    fencing.take_lease(store, "fraud")  # another instance took over and has not started the path
    assert not data.rt_running(store) and data.rt_start(store) == NOW - 60_000


def test_a_job_without_a_ready_standby_is_said():
    """Issue 36 item 3: a crash without a ready standby is a cold restart; the Overview says when."""
    import pandas as pd

    def jobs(*rows):
        return pd.DataFrame(rows, columns=["job", "status", "detail"])

    ready = jobs(("fraud", "running", ""), ("fraud-standby", "ready", "warm standby pid 7, session up"),
                 ("usage", "running", ""), ("usage-standby", "ready", "warm standby pid 8, session up"))
    assert data.standby_gaps(ready) == []
    waiting = jobs(("fraud", "running", ""), ("fraud-standby", "starting", "starts after fraud's first batch"),
                   ("usage", "running", ""), ("usage-standby", "standby", "warm standby pid 8"))
    fraud, usage = data.standby_gaps(waiting)
    assert fraud.startswith("fraud has no ready standby (starts after fraud's first batch)") and "cold restart" in fraud
    assert usage.startswith("usage has no ready standby") and "waits for that standby's session" in usage
    (none,) = data.standby_gaps(jobs(("fraud", "running", ""), ("usage", "running", "")))
    assert "without one" in none and "fraud or usage" in none
    stopped = jobs(("fraud", "stopped", ""), ("fraud-standby", "stopped", "supervisor stopped"))
    assert data.standby_gaps(stopped) == [] and data.standby_gaps(jobs()) == []
