"""The benches' figures as the dashboard reads them (dashboard/data/quality.py), on a real SQLite
store: the newest run only, fraud patterns first, and nothing before a bench has run."""
from __future__ import annotations

from pathlib import Path

from controlplane.store import connect
from dashboard.data import quality


def _quality_rows(db, run_id, ts, recall):
    for pattern, kind in (("ordinary", "legitimate"), ("all", "all"), ("card-testing", "fraud"),
                          ("flight", "legitimate"), ("travel-fraud", "fraud")):
        db["quality"].insert({"run_id": run_id, "ts": ts, "seed": 3, "threshold": 0.7, "pattern": pattern,
                              "kind": kind, "transactions": 10, "flagged": 2, "precision": 0.5,
                              "recall": recall if kind != "legitimate" else None,
                              "average_precision": 0.4 if kind != "legitimate" else None,
                              "flagged_share": 0.2})


def test_nothing_measured_yet(store):
    rows, run = quality.latest_quality(store)
    assert run is None and rows.empty and list(rows.columns) == quality.QUALITY_COLUMNS
    assert quality.latency_runs(store).empty


def test_the_newest_quality_run_fraud_patterns_first(store):
    _quality_rows(store, "old", 1_000, 0.9)
    _quality_rows(store, "new", 2_000, 0.3)
    rows, run = quality.latest_quality(store)
    assert run["run_id"] == "new" and run["seed"] == 3 and run["when"] == "1970-01-01 00:00 UTC"
    assert list(rows["pattern"]) == ["card-testing", "travel-fraud", "flight", "ordinary", "all"]
    assert set(rows.loc[rows["kind"] != "legitimate", "recall"]) == {0.3}


def test_latency_runs_the_newest_per_path_and_rate(store):
    for ts, mode, rate, p99 in ((1, "microbatch", 200.0, 900.0), (2, "microbatch", 200.0, 800.0),
                                (3, "realtime", 1000.0, 40.0)):
        store["latency_runs"].insert({"ts": ts, "mode": mode, "rate": rate, "p50_ms": 1.0, "p95_ms": 2.0,
                                      "p99_ms": p99, "max_ms": p99, "undecided": 0})
    runs = quality.latency_runs(store)
    assert list(runs["p99_ms"]) == [800.0, 40.0]
    assert list(runs["path"]) == [quality.PATHS["microbatch"], quality.PATHS["realtime"]]


def test_overview_shows_the_recorded_figures_and_says_what_they_are(tmp_path, monkeypatch):
    # deferred: streamlit only where a page renders
    from streamlit.testing.v1 import AppTest

    path = tmp_path / "dash.db"
    monkeypatch.setenv("CARDSTREAM_DB", str(path))
    monkeypatch.setenv("CHECKPOINT_ROOT", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "127.0.0.1:9")  # nothing answers: the page must not need Kafka
    monkeypatch.delenv("DASHBOARD_TOKEN", raising=False)
    db = connect(path)
    app = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
    try:
        at = AppTest.from_file(app, default_timeout=60)
        at.run()
        shown = "\n".join(str(e.value) for e in at.info)
        assert "no fraud quality measured yet" in shown and "no latency measured yet" in shown
        _quality_rows(db, "r1", 1_000, 0.25)
        db["latency_runs"].insert({"ts": 1, "mode": "realtime", "rate": 1000.0, "p50_ms": 9.0, "p95_ms": 30.0,
                                   "p99_ms": 70.0, "max_ms": 120.0, "undecided": 0})
        at.run()
        assert not at.exception
        shown = "\n".join(str(e.value) for e in at.caption)
        tables = "\n".join(e.value.to_string() for e in at.dataframe)
        assert "`bench quality` on 1970-01-01 00:00 UTC" in shown and "seed 3, threshold 0.7" in shown
        assert "card-testing" in tables and "0.25" in tables and quality.PATHS["realtime"] in tables
        at.switch_page("views/fraud.py").run()  # the Fraud page shows the same recorded runs
        assert not at.exception
        tables = "\n".join(e.value.to_string() for e in at.dataframe)
        assert "card-testing" in tables and quality.PATHS["realtime"] in tables
    finally:
        db.conn.close()
