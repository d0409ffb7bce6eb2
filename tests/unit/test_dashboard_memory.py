"""The Checkpoints page's memory and disk: the housekeeping's samples (written by its own `record`
on a real store) read back per process and per folder, in words, as charts, and the page under
Streamlit's AppTest with samples and without (the empty charts say why)."""
from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from controlplane.clock import now_ms
from controlplane.store import connect
from dashboard import charts
from dashboard.data import checkpoints as data
from dashboard.views import text
from pipelines.supervisor import housekeeping

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
MIN = 60_000
PROCESSES = {"supervisor": 60.0, "broker": 900.0, "simulator": 80.0, "fraud": 200.0, "fraud-jvm": 1000.0,
             "fraud-pyworkers": 150.0, "usage": 140.0, "usage-jvm": 700.0, "dashboard": 180.0}


def seed_samples(db, now: int, minutes: int = 12) -> None:
    """A sample a minute as the supervisor writes them: every process flat but the fraud JVM
    (+1 % a minute) and usage, whose driver was restarted (a new pid) at minute 6."""
    for m in range(minutes):
        ts = now - (minutes - 1 - m) * MIN
        rows = []
        for i, (name, rss) in enumerate(PROCESSES.items()):
            pid = 1000 + i
            if name == "fraud-jvm":
                rss *= 1 + 0.01 * m
            if name.startswith("usage") and m >= 6:
                pid += 500
            rows.append((name, pid, rss))
        storage = [("store", "/r/cardstream.db", (10 + m) * 2**20), ("checkpoints", "/r/checkpoints", 40 * 2**20),
                   ("kafka", "/r/kafka/data", (300 + 5 * m) * 2**20)]
        housekeeping.record(db, ts, rows, storage)
    db["process_memory"].insert({"ts": now - 30 * 60 * MIN, "process": "fraud", "pid": 1, "rss_mb": 9.0})  # 30 h ago


def test_memory_per_process_over_the_span(store):
    now = 1_900_000_000_000
    seed_samples(store, now)
    df = data.process_memory(store, now)
    assert len(df) == 12 * len(PROCESSES) and df["ts"].is_monotonic_increasing  # the 30-hour-old one left out
    summary = data.memory_now(df).set_index("process")
    assert summary.loc["fraud-jvm", "first_mb"] == 1000 and summary.loc["fraud-jvm", "rss_mb"] == pytest.approx(1110)
    assert summary.loc["fraud-jvm", "change_pct"] == pytest.approx(11.0)
    assert data.memory_now(df).iloc[0]["process"] == "fraud-jvm"  # the largest change first
    assert summary.loc["usage", "pids"] == 2 and summary.loc["fraud", "pids"] == 1
    said = text.memory(data.memory_now(df), 60)
    assert "one every 60.0 s" in said and "9 processes" in said
    assert "fraud-jvm +11 % (1,000 → 1,110 MB)" in said
    assert "usage was 2 processes" in said and "usage-jvm was 2 processes" in said
    assert text.memory(data.memory_now(df.iloc[0:0]), 60) == "No memory sample yet."


def test_bytes_on_disk_and_the_retention_in_words(store):
    now = 1_900_000_000_000
    seed_samples(store, now)
    disk = data.storage(store, now)
    assert set(disk["what"]) == {"store", "checkpoints", "kafka"} and disk["mib"].max() == 355
    latest = disk[disk["ts"] == disk["ts"].max()]
    said = text.storage(latest, data.retention(store), 24)
    assert "store 21.0 MiB" in said and "checkpoints 40.0 MiB" in said and "broker data 355.0 MiB" in said
    assert "no pass has run yet" in said
    housekeeping.prune(store, now, 24)
    said = text.storage(latest, data.retention(store), 24)
    assert "deleted 1 rows, 1 since the store was created" in said and "the sink ledger down to the batches a restart can consult" in said
    assert "keeps every row" in text.storage(latest, data.retention(store), 0)


def test_the_charts_one_line_per_process_and_per_folder(store):
    now = 1_900_000_000_000
    seed_samples(store, now)
    fig = charts.process_memory(data.process_memory(store, now))
    lines = {t.name: t for t in fig.data}
    assert set(lines) == set(PROCESSES)
    assert lines["fraud"].line.color == lines["fraud-jvm"].line.color != lines["usage"].line.color
    assert (lines["fraud"].line.dash, lines["fraud-jvm"].line.dash, lines["fraud-pyworkers"].line.dash) == \
           ("solid", "dash", "dot")
    assert fig.layout.yaxis.title.text == "RSS (MB)"
    disk = charts.storage(data.storage(store, now))
    assert {t.name for t in disk.data} == {"store (file + WAL)", "checkpoints (logs + RocksDB state)", "broker data"}


@pytest.fixture
def page_store(tmp_path, monkeypatch):
    path = tmp_path / "dash.db"
    monkeypatch.setenv("CARDSTREAM_DB", str(path))
    monkeypatch.setenv("CHECKPOINT_ROOT", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "127.0.0.1:9")  # nothing listens: the page must not need Kafka
    monkeypatch.delenv("DASHBOARD_TOKEN", raising=False)
    return path


def checkpoints_page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("views/checkpoints.py")
    at.run()
    return at


def shown(at: AppTest) -> str:
    return "\n".join(str(e.value) for kind in ("caption", "info", "subheader", "error", "warning")
                     for e in getattr(at, kind))


def test_the_page_without_samples_says_why(page_store):
    connect(page_store).conn.close()
    at = checkpoints_page()
    said = shown(at)
    assert not at.exception and not [e for e in at.error if "could not be drawn" in e.value]
    assert "Memory and disk" in said
    assert "no memory sample in the last 24 h" in said and "MEMORY_SAMPLE_SECONDS" in said
    assert "no size of the store or the checkpoints sampled" in said


def test_the_page_with_samples_draws_them(page_store):
    db = connect(page_store)
    seed_samples(db, now_ms())
    db.conn.close()
    at = checkpoints_page()
    said = shown(at)
    assert not at.exception and not [e for e in at.error if "could not be drawn" in e.value]
    assert "Newest sample at" in said and "fraud-jvm +11 %" in said and "broker data 355.0 MiB" in said
    assert "no memory sample" not in said
    titles = [e.proto.spec for e in at.get("plotly_chart")]
    assert any("Resident memory (RSS) per process" in spec for spec in titles)
    assert any("On disk: store, checkpoints, broker data" in spec for spec in titles)
