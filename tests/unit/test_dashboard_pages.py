"""Every dashboard page under Streamlit's AppTest: with data, with no data, with the broker down,
with the store busy; and the buttons, which write commands only when the token rule allows."""
from __future__ import annotations

import json
import socket
import sqlite3
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.harness.dashboard_seed import OBSERVED, TRUTH, seed_store
from controlplane.clock import now_ms
from controlplane.store import connect

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
PAGES = ["overview", "guarantees", "faults", "windows", "checkpoints", "fraud", "controls"]
TITLES = {"overview": "Overview", "guarantees": "Delivery guarantees", "faults": "Faults",
          "windows": "Event-time windows", "checkpoints": "Checkpoints & state", "fraud": "Fraud",
          "controls": "Simulator controls"}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def dead_broker(monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", f"127.0.0.1:{closed_port()}")


@pytest.fixture
def db_path(tmp_path, monkeypatch):
    path = tmp_path / "dash.db"
    monkeypatch.setenv("CARDSTREAM_DB", str(path))
    monkeypatch.delenv("DASHBOARD_TOKEN", raising=False)
    monkeypatch.setenv("DASHBOARD_HOST", "127.0.0.1")
    return path


@pytest.fixture
def seeded(db_path):
    db = connect(db_path)
    seed_store(db, now_ms())
    db.conn.close()
    return db_path


def open_page(name: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=30)
    at.run()
    if name != "overview":
        at.switch_page(f"views/{name}.py")
        at.run()
    return at


def text_of(at: AppTest) -> str:
    """Everything a reader sees: markdown, alerts, captions, metrics, dataframes (as text)."""
    parts = [e.value for kind in ("markdown", "caption", "info", "warning", "error", "success", "title",
                                  "subheader") for e in getattr(at, kind)]
    parts += [f"{m.label} {m.value} {m.delta or ''}" for m in at.metric]
    parts += [e.value.to_string() for e in at.dataframe]
    parts += [b.label for b in at.button]
    parts += [e.value for e in at.sidebar.success] + [e.value for e in at.sidebar.error]
    return "\n".join(str(p) for p in parts)


def assert_clean(at: AppTest, name: str):
    assert not at.exception, f"{name}: {[e.value for e in at.exception]}"
    assert at.title and at.title[0].value == TITLES[name]
    assert not [e for e in at.error if "could not be drawn" in e.value], [e.value for e in at.error]


def plotly_count(at: AppTest) -> int:
    return len(at.get("plotly_chart"))


EXPECT_WITH_DATA = {
    "overview": ["Tx in /s", "200.0", "Decisions /s", "Latency p99", "usage-at-least-once", "running"],
    "guarantees": [f"{OBSERVED['at-least-once']:,}", f"{OBSERVED['at-most-once']:,}", f"= truth {TRUTH:,}",
                   ":orange-badge[at-least-once] replayed batch 41", "+380 duplicates", "lost **120 events**",
                   "crash on usage"],
    "faults": ["Inject crash", "SIGKILL sent to pid 4242", "Zombie writes rejected", "bad-json", "Median 7.4 s"],
    "windows": ["Late events dropped", "80", "behind now", "usage-exactly-once"],
    "checkpoints": ["usage-exactly-once", "Restores", "/run/checkpoints/fraud", "41"],
    "fraud": ["92.0 %", "95.8 %", "Recently flagged", "txn-001160"],
    "controls": ["Set rate", "2500", "rate 2500/s"],
}
MIN_CHARTS = {"overview": 2, "guarantees": 2, "faults": 1, "windows": 2, "checkpoints": 3, "fraud": 2,
              "controls": 0}


@pytest.mark.parametrize("name", PAGES)
def test_page_with_data_and_broker_down(name, seeded, dead_broker):
    at = open_page(name)
    assert_clean(at, name)
    shown = text_of(at)
    for expected in EXPECT_WITH_DATA[name]:
        assert expected in shown, f"{name}: {expected!r} not on the page"
    assert plotly_count(at) >= MIN_CHARTS[name]
    if name == "overview":  # (AppTest drops the shared sidebar after switch_page; the browser test sees it)
        assert "Kafka broker down" in shown and "lag is unknown" in shown


@pytest.mark.parametrize("name", PAGES)
def test_page_with_no_data(name, db_path, dead_broker):
    at = open_page(name)
    assert_clean(at, name)
    assert any("No data yet" in e.value for e in at.info), f"{name} does not say it has no data"
    assert plotly_count(at) == 0


def test_overview_shows_consumer_lag_from_the_real_broker(seeded, kafka, monkeypatch):
    from kafka import KafkaProducer

    from infra.topics import ensure_topics

    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka)
    ensure_topics(["transactions", "decisions"], partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka)
    for i in range(6):
        producer.send("decisions", f"d{i}".encode(), partition=i % 2)
    producer.flush()
    producer.close()
    at = open_page("overview")
    assert_clean(at, "overview")
    shown = text_of(at)
    assert "Kafka up" in shown
    lag = next(d.value for d in at.dataframe if "lag" in d.value.columns)
    assert set(lag["query"]) >= {"usage-at-least-once", "usage-exactly-once"}
    assert (lag[lag["topic"] == "decisions"]["kafka_end"] >= 6).all()


def test_store_busy_is_said_in_words(seeded, dead_broker, monkeypatch):
    monkeypatch.setenv("DASHBOARD_STORE_TIMEOUT_MS", "100")
    holder = sqlite3.connect(str(seeded), isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        for name in ("guarantees", "faults"):
            at = open_page(name)
            assert not at.exception
            assert any("Store busy" in w.value for w in at.warning), name
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def commands_in(path) -> list[dict]:
    db = connect(path)
    try:
        return list(db.query("SELECT kind, job, params FROM commands ORDER BY id"))
    finally:
        db.conn.close()


def test_fault_button_issues_one_command(db_path, dead_broker):
    at = open_page("faults")
    at.number_input(key="seconds_sink-down").set_value(7)
    at.button(key="inject_sink-down").click()
    at.run()
    assert not at.exception
    assert commands_in(db_path) == [{"kind": "sink-down", "job": "usage", "params": json.dumps({"seconds": 7})}]
    assert any("issued: sink-down" in s.value for s in at.success)


def test_controls_write_simulator_commands(db_path, dead_broker):
    at = open_page("controls")
    at.button[0].click()  # Set rate (default 1000)
    at.run()
    [pause] = [b for b in at.button if "Pause" in b.label]
    pause.click()
    at.run()
    assert [(c["kind"], c["job"], json.loads(c["params"])) for c in commands_in(db_path)] == [
        ("set-rate", "simulator", {"rate": 1000}), ("pause", "simulator", {})]


def test_buttons_ask_for_the_token_when_one_is_set(db_path, dead_broker, monkeypatch):
    monkeypatch.setenv("DASHBOARD_TOKEN", "s3cret")
    at = open_page("faults")
    at.button(key="inject_crash").click()
    at.run()
    assert commands_in(db_path) == []
    assert any("Enter the dashboard token" in e.value for e in at.error)
    at.text_input(key="faults_token").set_value("wrong")
    at.button(key="inject_crash").click()
    at.run()
    assert commands_in(db_path) == [] and any("Wrong token" in e.value for e in at.error)
    at.text_input(key="faults_token").set_value("s3cret")
    at.button(key="inject_crash").click()
    at.run()
    assert [c["kind"] for c in commands_in(db_path)] == ["crash"]


@pytest.fixture
def listening_everywhere():
    """The server option as `--server.address 0.0.0.0` sets it (it wins over DASHBOARD_HOST)."""
    from streamlit import config

    before = config.get_option("server.address")
    config.set_option("server.address", "0.0.0.0")
    yield
    config.set_option("server.address", before)


def test_non_loopback_without_token_locks_the_buttons_but_not_the_pages(seeded, dead_broker, listening_everywhere):
    at = open_page("controls")
    assert any("buttons stay locked" in e.value for e in at.error)
    at.button[0].click()
    at.run()
    assert [c["kind"] for c in commands_in(seeded)] == ["crash", "set-rate"]  # only the seeded ones
    guarantees = open_page("guarantees")
    assert f"{OBSERVED['exactly-once']:,}" in text_of(guarantees)
