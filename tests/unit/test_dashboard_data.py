"""The dashboard's queries and rules, on a real SQLite store seeded as the pipelines write it,
and on the real Kafka broker for the end offsets behind the consumer lag."""
from __future__ import annotations

import json
import socket
import sqlite3

import pytest

from dashboard import auth, data
from tests.harness.dashboard_seed import FAULT_AGO_MS, OBSERVED, REPLAYED_BATCH, TRUTH, seed_store
from infra.config import load
from infra.contracts import GUARANTEES

NOW = 1_800_000_000_000


@pytest.fixture
def seeded(store):
    seed_store(store, NOW)
    return store


# --- the token rule -------------------------------------------------------------------------------

@pytest.mark.parametrize("host,loopback", [("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True),
                                           ("::1", True), ("0.0.0.0", False), ("192.168.1.5", False),
                                           ("", False), (None, False), ("example.org", False)])
def test_loopback(host, loopback):
    assert auth.is_loopback(host) is loopback


def test_token_rule():
    assert auth.check(None, "127.0.0.1", None).allowed  # local, no token: open
    assert not auth.check(None, "127.0.0.1", "t").allowed  # a token is set: asked for
    assert not auth.check("x", "127.0.0.1", "t").allowed
    assert auth.check("t", "127.0.0.1", "t").allowed
    locked = auth.check("anything", "0.0.0.0", None)  # beyond loopback without a token: locked
    assert not locked.allowed and "DASHBOARD_TOKEN" in locked.reason
    assert auth.check("t", "0.0.0.0", "t").allowed


# --- overview -------------------------------------------------------------------------------------

def test_rates_and_latency(seeded):
    r = data.rates(seeded, NOW)
    assert r["transactions_per_s"] == 200.0  # the fraud query's input rate, not the dlq's or usage's
    assert r["decisions_per_s"] == pytest.approx(20, abs=0.2)  # one decision every 50 ms
    assert 0 < r["fraud_rate"] < 0.05
    lat = data.recent_latencies(seeded)
    summary = data.latency_summary(lat)
    assert summary["n"] == 1200 and 6 <= summary["p50"] <= 14 and summary["p99"] > summary["p50"]
    assert summary["within_goal"] == pytest.approx(0.99)
    series = data.latency_series(lat, bucket_s=5)
    assert len(series) in (12, 13) and (series["p99"] >= series["p50"]).all()
    assert data.latency_summary(lat.head(0))["p50"] is None


def test_job_status_and_dead_letters(seeded):
    jobs = data.job_status(seeded, NOW)
    assert list(jobs["job"]) == ["fraud", "usage"] and jobs.loc[1, "restarts"] == 1
    assert data.dead_letters(seeded)["count"].sum() == 17


@pytest.mark.parametrize("raw,expected", [
    (json.dumps([json.dumps({"t": {"0": 5, "1": 7}})]), {"t": {0: 5, 1: 7}}),   # as metrics.py records it
    (json.dumps([{"t": {"0": 5}}, {"u": {"2": 1}}]), {"t": {0: 5}, "u": {2: 1}}),
    (json.dumps({"t": {"0": 5}}), {"t": {0: 5}}),
    ("[null]", {}), ("not json", {}), (None, {}), (json.dumps(["{bad"]), {}),
])
def test_parse_offsets(raw, expected):
    assert data.parse_offsets(raw) == expected


def test_consumer_lag(seeded):
    last = data.last_batch_offsets(seeded)
    assert set(last) == {"fraud", *(f"usage-{g}" for g in GUARANTEES)}
    lag = data.consumer_lag({"decisions": {0: 4_990, 1: 5_010}, "transactions": {0: 5_000, 1: 5_100}}, last)
    by_query = dict(zip(lag["query"], lag["lag"]))
    assert by_query == {"fraud": 0, "usage-at-least-once": 400, "usage-at-most-once": 0, "usage-exactly-once": 0}
    unknown = data.consumer_lag({}, last, known_ends=False)
    assert "lag" not in unknown and len(unknown) == 4


def test_kafka_end_offsets_from_the_real_broker(kafka, topic):
    from kafka import KafkaProducer

    name = topic("lag", partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka)
    for i in range(7):
        producer.send(name, b"x", partition=i % 2)
    producer.flush()
    producer.close()
    assert data.kafka_end_offsets(kafka, [name, "no-such-topic-here"]) == {name: {0: 4, 1: 3}}


def test_kafka_end_offsets_say_broker_down():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(data.BrokerDown, match="broker down"):
        data.kafka_end_offsets(f"127.0.0.1:{port}", ["t"], timeout_s=0.5)


# --- guarantees -----------------------------------------------------------------------------------

def test_latest_audit_and_series(seeded):
    latest = data.latest_audit(seeded, "usage").set_index("guarantee")
    assert latest.loc["at-least-once", "observed"] == OBSERVED["at-least-once"]
    assert set(latest["truth"]) == {TRUTH} and (latest["ts"] == latest["ts"].max()).all()
    series = data.audit_series(seeded, "usage", "processed", NOW)
    assert len(series) == 180 and series["error"].max() == 380 and series["error"].min() == -120


def test_fault_marks_are_faults_only(seeded):
    marks = data.fault_marks(seeded, NOW)
    assert list(marks["kind"]) == ["crash"]  # the simulator's set-rate is not a fault
    assert marks["time"].iloc[0].value // 1_000_000 == NOW - FAULT_AGO_MS


def test_guarantee_stories(seeded):
    stories = data.guarantee_stories(seeded, NOW)
    assert f"replayed batch {REPLAYED_BATCH}" in stories["at-least-once"] and "+380 duplicates" in stories["at-least-once"]
    assert "lost **120 events**" in stories["at-most-once"]
    assert f"skipped replayed batch {REPLAYED_BATCH}" in stories["exactly-once"]


def test_describe_guarantee_in_plain_words():
    row = lambda ts, obs, lost=0, dup=0: {"ts": ts, "truth": 100, "observed": obs, "lost": lost, "duplicated": dup}  # noqa: E731
    assert "no audit yet" in data.describe_guarantee("exactly-once", [])
    said = data.describe_guarantee("at-least-once", [row(3, 150, dup=50), row(2, 120, dup=20), row(1, 100)], 41)
    assert "replayed batch 41" in said and "+30 duplicates" in said  # the newest change, not the total
    assert "count = truth = 100" in data.describe_guarantee("exactly-once", [row(2, 100), row(1, 100)], None, 9)
    assert "last applied batch 9" in data.describe_guarantee("exactly-once", [row(2, 100)], None, 9)
    steady = data.describe_guarantee("at-most-once", [row(2, 90, lost=10), row(1, 90, lost=10)])
    assert "no new loss" in steady and "10 lost" in steady
    behind = data.describe_guarantee("exactly-once", [row(2, 80, lost=20), row(1, 100)])
    assert "20 events** behind" in behind and "checkpoint" in behind and "lost **" not in behind


# --- faults, windows, checkpoints -----------------------------------------------------------------

def test_command_log_and_issue(seeded):
    cid = data.issue(seeded, "sink-down", "usage", seconds=7)
    log = data.command_log(seeded)
    assert log.iloc[0]["id"] == cid and log.iloc[0]["params"] == "seconds=7" and log.iloc[0]["status"] == "pending"
    crash = log[log["kind"] == "crash"].iloc[0]
    assert crash["took_s"] == 0.3 and "SIGKILL" in crash["result"]
    assert list(data.command_log(seeded, job="simulator")["kind"]) == ["set-rate"]
    assert data.rejected_total(seeded) == 3 and data.recoveries(seeded)["seconds"].tolist() == [7.4]


def test_windows_watermarks_and_late(seeded):
    tumbling = data.windows(seeded, "tumbling", NOW)
    assert len(tumbling) == 30 and (tumbling["length_s"] == 10).all()
    assert len(data.windows(seeded, "session", NOW)) == 12
    assert sorted(data.window_kinds(seeded)) == ["session", "sliding", "tumbling"]
    wm = data.watermarks(seeded, NOW).set_index("query")
    assert wm.loc["usage-windows", "behind_s"] == 31.0  # from usage_watermarks
    assert 30 < wm.loc["fraud", "behind_s"] < 40        # from Spark's progress
    assert data.late_events(seeded)["dropped"].sum() == 80
    assert data.dropped_by_watermark(seeded, NOW)["dropped"].sum() > 0


def test_batches_state_and_restores(seeded):
    batches = data.batches(seeded, NOW)
    assert set(batches["query"]) == {"fraud", *(f"usage-{g}" for g in GUARANTEES)}
    state = data.state_now(batches).set_index("query")
    assert state.loc["fraud", "last_batch"] == 59 and state.loc["usage-exactly-once", "state_rows"] > 0
    restores = data.restores(seeded, NOW)
    assert set(restores["query"]) == {"usage-at-least-once", "usage-exactly-once"}
    assert set(restores["batch_id"]) == {REPLAYED_BATCH}


# --- fraud and controls ---------------------------------------------------------------------------

def test_flagged_and_quality(seeded):
    flagged = data.flagged(seeded, 10)
    assert len(flagged) == 10 and flagged["decided_at"].is_monotonic_decreasing
    assert (flagged["score_avg_ticket"] >= 0.7).all()
    q = data.fraud_quality(seeded)
    assert q["precision"] == pytest.approx(0.92) and q["recall"] == pytest.approx(230 / 240)
    assert q["processed_truth"] == TRUTH
    assert data.quality_series(seeded, NOW)["value"].between(0, 1).all()


@pytest.mark.parametrize("truth,observed,expected", [(250, 230, 0.92), (None, 0.9, 0.9), (0, 0.5, 0.5),
                                                     (1, 1, 1.0), (0, 5, None), (10, None, None)])
def test_ratio_reads_counts_or_ratios(truth, observed, expected):
    assert data.ratio(truth, observed) == (pytest.approx(expected) if expected is not None else None)


def test_simulator_settings(seeded):
    assert data.simulator_settings(seeded)["set-rate"]["params"] == {"rate": 2500}
    assert data.simulator_settings(seeded)["paused"] is False
    data.issue(seeded, "pause", "simulator")
    assert data.simulator_settings(seeded)["paused"] is True
    data.issue(seeded, "resume", "simulator")
    assert data.simulator_settings(seeded)["paused"] is False


# --- empty and busy stores ------------------------------------------------------------------------

def test_every_query_on_an_empty_store(store):
    assert data.rates(store, NOW)["fraud_rate"] is None
    assert data.latency_series(data.recent_latencies(store)).empty
    for frame in (data.job_status(store, NOW), data.latest_audit(store, "usage"),
                  data.audit_series(store, "usage", "processed", NOW), data.fault_marks(store, NOW),
                  data.command_log(store), data.recoveries(store), data.windows(store, "session", NOW),
                  data.watermarks(store, NOW), data.late_events(store), data.late_series(store, NOW),
                  data.batches(store, NOW), data.state_now(data.batches(store, NOW)), data.restores(store, NOW),
                  data.flagged(store), data.quality_series(store, NOW)):
        assert frame.empty
    assert data.last_batch_offsets(store) == {}
    assert all("no audit yet" in line for line in data.guarantee_stories(store, NOW).values())
    assert data.fraud_quality(store)["precision"] is None


def test_a_locked_store_fails_fast_with_database_is_locked(tmp_path, monkeypatch):
    path = tmp_path / "locked.db"
    monkeypatch.setenv("CARDSTREAM_DB", str(path))
    monkeypatch.setenv("DASHBOARD_STORE_TIMEOUT_MS", "100")
    with data.open_store(load()) as db:
        seed_store(db, NOW)
    holder = sqlite3.connect(str(path), isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            with data.open_store(load()) as db:
                data.rates(db, NOW)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_recent_reads_use_indexes(seeded):
    def plan(sql, args=()):
        return " ".join(r[3] for r in seeded.conn.execute("EXPLAIN QUERY PLAN " + sql, args))
    assert "INDEX" in plan("SELECT COUNT(*) FROM decisions WHERE decided_at > ?", [NOW])
    assert "INDEX" in plan("SELECT * FROM batch_progress WHERE ts > ? ORDER BY ts DESC LIMIT 5", [NOW])
    assert "INDEX" in plan("SELECT * FROM windows WHERE kind = ? AND window_start > ?", ["tumbling", NOW])
