"""Issue 19 on a real SQLite store: the Overview says what is starting while it starts, leaves the
warm-up out of the latency tiles and says so, and draws every command on the latency and throughput
time axis; the Checkpoints page draws each query's rates, watermark gap, state eviction and commit."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from controlplane.clock import now_ms
from controlplane.store import connect
from dashboard import charts, fmt
from dashboard.data import checkpoints as ckpt, overview as data
from tests.harness.dashboard_seed import NOW, seed_first_minute, world  # noqa: F401 - a fixture
from tests.unit.test_dashboard_overview import seeded_pairs
from tests.unit.test_dashboard_pages import APP, db_path, dead_broker, seed, text_of  # noqa: F401 - fixtures


@pytest.mark.parametrize("phase", ["session", "first-batch", "warm"])
def test_startup_phase(store, phase):
    seeded = seed_first_minute(store, NOW, phase)
    rows = data.startup(store, NOW)
    if phase == "warm":
        assert rows == []
        return
    assert [r["job"] for r in rows] == ["fraud"] and rows[0]["phase"] == phase and rows[0]["pid"] == 4100
    assert rows[0]["up_s"] == pytest.approx(55)
    if phase == "first-batch":
        assert rows[0]["queries_s"] == pytest.approx((NOW - seeded.lease_at) / 1000) and rows[0]["epoch"] == 1


def test_warmup_is_what_waited_through_the_start(store):
    seeded = seed_first_minute(store, NOW, "warm")
    start = data.warmup(store)
    assert start["batch_id"] == 0 and start["batch_started"] == seeded.first_batch_started
    every = data.latency_frame(seeded_pairs(store, limit=10_000))   # all of them
    steady, warm = data.split_warmup(every, start["batch_started"])
    assert len(warm) == seeded.warm and len(steady) == seeded.steady
    assert warm["latency_ms"].min() > 19_000                        # they waited for the first batch
    summary = data.latency_summary(steady)
    assert 6 <= summary["p50"] <= 14 and summary["p99"] <= 14 and summary["within_goal"] == 1.0
    assert data.latency_summary(every)["p99"] > 19_000               # what the tiles would have shown


def test_no_warmup_before_a_first_batch(store):
    seed_first_minute(store, NOW, "first-batch")
    assert data.warmup(store) is None


def test_timeline_joins_commands_and_recoveries(world):
    db, seeded, _ = world
    tl = data.timeline(db, NOW - 400_000, NOW)
    assert list(tl["kind"]) == ["set-rate", "bad-input", "crash"]
    crash = tl.iloc[-1]
    assert crash["status"] == "done" and crash["via"] == "restart" and crash["killed_at"] == seeded.fault_at
    assert crash["recovered_s"] == pytest.approx((crash["recovered_at"] - seeded.fault_at) / 1000)
    assert tl.iloc[0][["recovered_s"]].isna().all()
    series = data.latency_series(data.latency_frame(seeded_pairs(db)))
    fig = charts.overview_timeline(series, 20, tl)
    assert [a.title.text for a in (fig.layout.yaxis, fig.layout.yaxis2, fig.layout.yaxis3)] == \
        ["latency (ms)", "decisions/s", "command"]
    assert fig.layout.xaxis3.title.text == "time (UTC)"
    assert any(t.text and "recovered in" in (t.text[-1] or "") for t in fig.data if getattr(t, "mode", None) == "lines+text")


def test_query_health_series(world):
    db, _, _ = world
    df = ckpt.batches(db, NOW)
    fraud = df[df["query"] == "fraud"]
    assert fraud["watermark_gap_s"].dropna().round(1).eq(30.0).all()       # the fraud job's 30 s watermark
    eo = df[df["query"] == "usage-exactly-once"]
    assert eo["watermark_gap_s"].dropna().between(299, 301).all()          # DEDUPE_SECONDS / 2: the dedupe's watermark
    assert df[df["query"] == "usage-at-most-once"]["watermark_gap_s"].isna().all()
    fig = charts.query_health(fraud, "fraud")
    titles = [fig.layout[f"yaxis{i}"].title.text for i in ("", 2, 3, 4)]
    assert titles == ["rows/s", "gap (s)", "rows", "duration (ms)"]


def _page(name: str | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    if name:
        at.switch_page(f"views/{name}.py")
        at.run()
    return at


@pytest.mark.parametrize("phase,words", [
    ("session", ["fraud job starting", "Spark session starting, no batch yet", "pid 4100"]),
    ("first-batch", ["fraud job starting", "Spark session up, no batch yet", "lease epoch 1",
                     "1 of the Spark processes link theirs"]),
    ("warm", ["Tx in /s", "Fraud rate"]),
])
def test_overview_in_the_first_minute(db_path, dead_broker, phase, words):
    """With the broker down the latency (read from Kafka, tests/kafka/test_overview_rt_latency.py
    has it with a broker) is said to be unknown; the start-up sentences come from the store."""
    db = connect(db_path)
    try:
        seed_first_minute(db, now_ms(), phase)
    finally:
        db.conn.close()
    at = _page()
    shown = text_of(at)
    assert not at.exception, at.exception
    for w in words:
        assert w in shown, (w, shown[:2000])
    assert "Decision latency unknown: Kafka" in shown
    if phase == "warm":
        assert "fraud job starting" not in shown
    p99 = next(m for m in at.metric if m.label == "Latency p99")
    assert p99.value == fmt.duration_ms(None)


def test_checkpoints_page_per_query(db_path, dead_broker):
    seed(db_path)
    at = _page("checkpoints")
    assert not at.exception
    shown = text_of(at)
    assert "Per query" in shown and "the watermark trails the newest event by 30.0 s" in shown
    at.selectbox(key="health_query").set_value("usage-at-most-once").run()
    assert "no event-time watermark" in text_of(at)


def test_spark_ui_links_only_the_live_process(world, store):
    db, _, _ = world
    jobs = data.job_status(db, NOW).set_index("job")
    assert jobs.loc["fraud", "spark_ui"] == "http://localhost:4040"
    assert jobs.loc["usage", "spark_ui"] == "http://localhost:4043"        # the restarted process's
    assert jobs.loc["fraud-standby", "spark_ui"] == "http://localhost:4042"
    assert pd.isna(jobs.loc["simulator", "spark_ui"])                       # not a Spark process
    # a job restarting: the row's pid is gone, so is its link; a new pid that has not written one yet
    seed_first_minute(store, NOW, "warm")
    store.conn.execute("UPDATE job_status SET pid = 4200 WHERE job = 'fraud'")
    assert pd.isna(data.job_status(store, NOW).set_index("job").loc["fraud", "spark_ui"])


def test_warmup_chart_without_commands(store):
    seed_first_minute(store, NOW, "warm")
    start = data.warmup(store)
    every = data.latency_frame(seeded_pairs(store))
    _, warm = data.split_warmup(every, start["batch_started"])
    fig = charts.overview_timeline(data.latency_series(every), 20, data.timeline(store, NOW - 120_000, NOW),
                                   {"start": pd.Timestamp(start["batch_started"], unit="ms"),
                                    "end": pd.Timestamp(int(warm["dec_appended"].max()), unit="ms")})
    assert "yaxis3" not in fig.layout or fig.layout.yaxis3.domain is None      # no empty commands row
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.title.text == "latency (ms, log)"
    assert fig.layout.yaxis.dtick == 1  # 10, 100, 1000, ...: no 2s and 5s between them
    low, high = fig.layout.yaxis.range
    assert 10 ** low <= 10 and 10 ** high >= 20_000 and 10 ** high < 100_000   # ms to the warm-up's tens of s
    assert fig.layout.xaxis2.title.text == "time (UTC)"
    assert len(fig.layout.shapes) == 3  # the goal line and the warm-up shaded on both panels


def test_what_spark_reports_for_a_first_batch(store):
    """As make demo showed: a query's first batch reports 0 rows/s whatever it read, and a watermark
    of 0 (1970) until one is set; neither is a rate or a gap. The fraud query reads its labels
    beside its transactions, and Spark's rate sums the two: the Overview's "Tx in /s" is the
    transactions source's alone (make demo at 200 tx/s showed 401)."""
    def sources(per_s):
        return json.dumps({"transactions": {"rows": 1_232, "per_s": per_s}, "labels": {"rows": 1_232, "per_s": per_s}})

    row = {"query": "fraud", "batch_id": 0, "ts": NOW - 2_000, "num_input_rows": 2_464, "input_rows_per_s": 0.0,
           "processed_rows_per_s": 63.9, "duration_ms": 38_571, "trigger_ms": 30_000, "commit_ms": 420,
           "state_rows": 64, "state_memory_bytes": 2**20, "state_disk_bytes": 0, "state_rows_dropped_late": 0,
           "state_rows_removed": 0, "watermark": "1970-01-01T00:00:00.000Z", "event_time_max": "2027-01-15T08:00:00.000Z",
           "start_offsets": "[]", "end_offsets": "[]", "checkpoint": "/run/checkpoints/fraud/decisions",
           "sources": sources(0.0)}
    store["batch_progress"].insert(row)
    assert data.rates(store, "transactions", NOW)["transactions_per_s"] is None
    assert ckpt.batches(store, NOW)["watermark_gap_s"].isna().all()
    store["batch_progress"].insert({**row, "batch_id": 1, "ts": NOW - 1_000, "input_rows_per_s": 274.2,
                                    "sources": sources(137.1), "watermark": "2027-01-15T07:59:20.000Z"})
    assert data.rates(store, "transactions", NOW)["transactions_per_s"] == pytest.approx(137.1)
    assert data.rates(store, "other-topic", NOW)["transactions_per_s"] is None
    assert ckpt.batches(store, NOW)["watermark_gap_s"].tolist()[-1] == pytest.approx(40.0)
