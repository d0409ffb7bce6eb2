"""Every dashboard page under Streamlit's AppTest: with data, with no data, with the broker down,
with the store busy; and the catalogue's buttons, which write commands only when the catalogue
and the token rule allow."""
from __future__ import annotations

import json
import socket
import sqlite3
from pathlib import Path

import pytest
from streamlit import config
from streamlit.testing.v1 import AppTest

from controlplane.clock import now_ms
from controlplane.faults import CATALOGUE, CONTROLS, FAULTS
from controlplane.store import connect
from dashboard import fmt
from tests.harness.dashboard_seed import FAULT_BATCH, seed_store

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
PAGES = ["overview", "guarantees", "faults", "windows", "checkpoints", "fraud", "model", "controls"]
TITLES = {"overview": "Overview", "guarantees": "Delivery guarantees", "faults": "Faults",
          "windows": "Event-time windows", "checkpoints": "Checkpoints & state", "fraud": "Fraud",
          "model": "Model", "controls": "Controls"}


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
    monkeypatch.setenv("CHECKPOINT_ROOT", str(tmp_path / "checkpoints"))
    monkeypatch.delenv("DASHBOARD_TOKEN", raising=False)
    monkeypatch.setenv("DASHBOARD_HOST", "127.0.0.1")
    return path


def seed(db_path, scenario="crash"):
    db = connect(db_path)
    try:
        return seed_store(db, now_ms(), scenario=scenario, checkpoint_root=db_path.parent / "checkpoints")
    finally:
        db.conn.close()


@pytest.fixture
def seeded(db_path):
    return db_path, seed(db_path)


def open_page(name: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
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
    parts += [e.value for e in at.sidebar.success] + [e.value for e in at.sidebar.warning]
    parts += [e.value for e in at.sidebar.error]
    return "\n".join(str(p) for p in parts)


def assert_clean(at: AppTest, name: str):
    assert not at.exception, f"{name}: {[e.value for e in at.exception]}"
    assert at.title and at.title[0].value == TITLES[name]
    assert not [e for e in at.error if "could not be drawn" in e.value], [e.value for e in at.error]
    for m in at.metric:  # figures that fit: no cut value, no "nan"/"None", no ".0" on a count
        assert "…" not in m.value and m.value not in ("nan", "None") and not m.value.endswith(".0"), (m.label, m.value)
        assert "…" not in m.label and len(m.label) <= 24, m.label  # a label a tile of a third of the page shows whole


def plotly_count(at: AppTest) -> int:
    return len(at.get("plotly_chart"))


def expected(name: str, s) -> list[str]:
    amo, alo, eo = (s.final[g] for g in ("at-most-once", "at-least-once", "exactly-once"))
    return {
        "overview": ["Tx in /s", "Decisions /s", "Latency p99", "Decision latency unknown: Kafka", "usage-at-least-once", "running",
                     "malformed JSON: 12", "fraud-standby", "warm standby pid 4101, session up"],
        "guarantees": [fmt.count(alo["observed"]), f"of truth {fmt.count(alo['truth'])}",
                       f"= truth {fmt.count(eo['truth'])}", f"lost {fmt.count(amo['lost'])}",
                       f"duplicated {fmt.count(alo['duplicated'])} ({fmt.count(alo['replayed'])} replayed, 0 upstream)",
                       f"behind {fmt.count(alo['lag_records'])} records", "lost 0 · duplicated 0",
                       f"applied batch {FAULT_BATCH} twice", f"skipped the replay of batch {FAULT_BATCH}",
                       "started a new checkpoint", "crash on usage at", "Fraud job (its own exactly-once sinks)"],
        "faults": [*(f"Inject {k}" for k in FAULTS), "SIGKILL sent to usage driver pid 4242", "Zombie writes rejected",
                   "malformed JSON", "cold restart: median 7"],
        "windows": ["Late events", "behind now", "usage-exactly-once", "DEDUPE_SECONDS / 2 (300 s of 600 s)",
                    "WATERMARK_SECONDS (30 s)"],
        "checkpoints": ["usage-exactly-once", "Where each checkpoint stands", "running (not committed yet)",
                        "applied, applied", "applied, skipped", "killed by crash", "Batch history"],
        "fraud": [fmt.percent(s.fraud["precision"]), fmt.percent(s.fraud["recall"]), "Recently flagged",
                  f"= truth {fmt.count(s.fraud['truth'])}", "Live precision", "a consistency check, not the "
                  "detector's quality", "No handbook run yet", "python -m bench handbook --json"],
        "model": ["No learned model yet: the rules decide (model 0)", "Deciding with", "rules",
                  "its labels live only in Kafka (`labels`)", "What matters",
                  "Each decision carries its three largest contributions"],
        "controls": ["Set rate", "Pause", "Resume", "rate 40/s", "40 tx/s"],
    }[name]


MIN_CHARTS = {"overview": 0, "guarantees": 3, "faults": 1, "windows": 2, "checkpoints": 3, "fraud": 2, "model": 1,
              "controls": 0}


@pytest.mark.parametrize("name", PAGES)
def test_page_with_data_and_broker_down(name, seeded, dead_broker):
    _, s = seeded
    at = open_page(name)
    assert_clean(at, name)
    shown = text_of(at)
    for want in expected(name, s):
        assert want in shown, f"{name}: {want!r} not on the page"
    assert plotly_count(at) >= MIN_CHARTS[name]
    if name == "overview":  # (AppTest drops the shared sidebar after switch_page; the browser test sees it)
        assert "Kafka broker down" in shown and "lag is unknown" in shown


def test_guarantees_with_no_fault_say_lost_0_and_behind(db_path, dead_broker):
    s = seed(db_path, "quiet")
    shown = text_of(open_page("guarantees"))
    assert shown.count("lost 0 · duplicated 0") == 3 and ":red-badge[lost" not in shown
    assert f"behind {fmt.count(s.final['at-least-once']['lag_records'])} records" in shown
    assert shown.count("no loss or duplicate in this time") == 3 and "no fault recorded" not in shown


@pytest.mark.parametrize("name", PAGES)
def test_page_with_no_data(name, db_path, dead_broker):
    at = open_page(name)
    assert_clean(at, name)
    assert any("No data yet" in e.value for e in at.info), f"{name} does not say it has no data"
    assert plotly_count(at) == 0


def test_store_busy_is_said_in_words(seeded, dead_broker, monkeypatch):
    path, _ = seeded
    monkeypatch.setenv("DASHBOARD_STORE_TIMEOUT_MS", "100")
    holder = sqlite3.connect(str(path), isolation_level=None)
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
        return [{**r, "params": json.loads(r["params"])} for r in db.query("SELECT kind, job, params FROM commands "
                                                                           "ORDER BY id")]
    finally:
        db.conn.close()


def test_the_faults_page_is_the_catalogue(db_path, dead_broker):
    at = open_page("faults")
    for kind in FAULTS:
        fault = CATALOGUE[kind]
        assert at.button(key=f"inject_{kind}").label == f"Inject {kind}"
        if len(fault.jobs) > 1:
            box = at.selectbox(key=f"job_{kind}")
            assert box.options == list(fault.jobs) and box.value == fault.jobs[0]
        for p in fault.params:
            if p.kind is str:
                assert at.selectbox(key=f"{p.name}_{kind}").options == ["default", *p.choices]
                continue
            box = at.number_input(key=f"{p.name}_{kind}")
            assert box.value == p.default and box.min == p.minimum and box.max == p.maximum
            assert p.unit in box.label


def test_crash_on_usage_as_the_supervisor_test_presses_it(db_path, dead_broker):
    at = open_page("faults")
    at.selectbox(key="job_crash").select("usage")
    at.button(key="inject_crash").click()
    at.run()
    assert not at.exception
    assert commands_in(db_path) == [{"kind": "crash", "job": "usage", "params": {}}]
    assert any("issued: crash on usage" in s.value for s in at.success)


def test_fault_button_issues_one_command_with_the_catalogue_s_parameters(db_path, dead_broker):
    at = open_page("faults")
    at.number_input(key="seconds_sink-down").set_value(7.0)
    at.button(key="inject_sink-down").click()
    at.run()
    assert commands_in(db_path) == [{"kind": "sink-down", "job": "usage", "params": {"seconds": 7.0}}]
    assert any("issued: sink-down on usage (seconds 7 s)" in s.value for s in at.success)
    at.button(key="inject_late-burst").click()  # the catalogue's default, untouched
    at.run()
    assert commands_in(db_path)[-1] == {"kind": "late-burst", "job": "simulator",
                                        "params": {"count": CATALOGUE["late-burst"].param("count").default}}


def test_a_refused_command_is_one_sentence_and_nothing_is_written(db_path, dead_broker):
    at = open_page("faults")
    at.selectbox(key="job_crash-after-sink").select("fraud")
    at.selectbox(key="guarantee_crash-after-sink").select("exactly-once")
    at.button(key="inject_crash-after-sink").click()
    at.run()
    assert commands_in(db_path) == []
    said = [e.value for e in at.error if "Kafka" not in e.value]  # (the sidebar says the broker is down)
    assert said == ["crash-after-sink: guarantee targets a usage query; the fraud job has none."]


def test_controls_come_from_the_catalogue_and_need_their_values(db_path, dead_broker):
    at = open_page("controls")
    labels = {b.label for b in at.button}
    assert labels == {k.replace("-", " ").capitalize() for k in CONTROLS}
    assert at.number_input(key="rate_set-rate").value is None  # never sent: no value made up here
    at.button(key="send_set-rate").click()
    at.run()
    assert commands_in(db_path) == [] and any("set-rate needs the parameter 'rate'" in e.value for e in at.error)
    at.number_input(key="rate_set-rate").set_value(2500.0)
    at.button(key="send_set-rate").click()
    at.run()
    at.button(key="send_pause").click()
    at.run()
    assert commands_in(db_path) == [{"kind": "set-rate", "job": "simulator", "params": {"rate": 2500.0}},
                                    {"kind": "pause", "job": "simulator", "params": {}}]


def test_a_control_starts_at_the_value_last_asked(seeded, dead_broker):
    at = open_page("controls")
    assert at.number_input(key="rate_set-rate").value == 40.0


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
    before = config.get_option("server.address")
    config.set_option("server.address", "0.0.0.0")
    yield
    config.set_option("server.address", before)


def test_non_loopback_without_token_locks_the_buttons_but_not_the_pages(seeded, dead_broker, listening_everywhere):
    path, s = seeded
    at = open_page("controls")
    assert any("buttons stay locked" in e.value for e in at.error)
    at.button(key="send_pause").click()
    at.run()
    assert sorted(c["kind"] for c in commands_in(path)) == ["bad-input", "crash", "set-rate"]  # the seeded ones
    guarantees = open_page("guarantees")
    assert fmt.count(s.final["exactly-once"]["observed"]) in text_of(guarantees)
