"""The Faults page's queries (command log, recoveries, fenced writes, dead letters), its Kafka
module when the broker does not answer, and the catalogue-derived inputs."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from controlplane import commands
from controlplane.faults import CATALOGUE, FAULTS
from controlplane.store import connect
from dashboard import forms
from dashboard.data import faults as data, kafka
from dashboard.views import text
from infra.config import load
from tests.harness.dashboard_seed import BAD, NOW, POISON_BATCH, seed_poison, seed_store
from tests.unit.test_dashboard_pages import APP


@pytest.fixture
def seeded(store, tmp_path):
    return store, seed_store(store, NOW, checkpoint_root=tmp_path / "checkpoints")


def test_command_log(seeded):
    db, s = seeded
    cid = commands.issue(db, "sink-down", "usage", seconds=7)
    log = data.command_log(db)
    assert log.iloc[0]["id"] == cid and log.iloc[0]["params"] == {"seconds": 7.0} and log.iloc[0]["status"] == "pending"
    crash = log[log["kind"] == "crash"].iloc[0]
    assert crash["took_s"] == pytest.approx(0.002) and "SIGKILL" in crash["result"]
    assert list(data.command_log(db, job="simulator")["kind"]) == ["bad-input", "set-rate"]
    assert list(data.command_log(db, kinds=("crash",))["kind"]) == ["crash"]
    assert text.params("sink-down", log.iloc[0]["params"]) == "seconds 7 s"


def test_recoveries_fenced_writes_dead_letters(seeded):
    db, s = seeded
    rec = data.recoveries(db)
    assert len(rec) == 1 and rec.iloc[0]["killed_at"] == s.fault_at and 5 < rec.iloc[0]["seconds"] < 10
    parts = rec.iloc[0][["to_lease_s", "to_batch_s", "batch_s"]]
    assert parts.notna().all() and abs(parts.sum() - rec.iloc[0]["seconds"]) < 1e-6
    assert data.rejected_total(db) == 0 and data.rejected_writes(db).empty
    assert data.dead_letters(db)["count"].sum() == BAD


def test_empty_store(store):
    for frame in (data.command_log(store), data.recoveries(store), data.rejected_writes(store),
                  data.dead_letters(store)):
        assert frame.empty
    assert data.rejected_total(store) == 0


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_kafka_calls_say_broker_down(monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", f"127.0.0.1:{closed_port()}")
    s = load()
    assert kafka.answers(s, 0.3) is False
    with pytest.raises(kafka.BrokerDown, match="broker down: Kafka at 127.0.0.1:.* refused the connection"):
        kafka.end_offsets(s, ["decisions"], timeout_s=0.3)


def test_every_input_comes_from_the_catalogue():
    """Labels carry the unit, steps follow the range; no default is written in dashboard/."""
    seconds = CATALOGUE["sink-down"].param("seconds")
    assert forms.label(seconds) == "seconds (s)" and forms._step(seconds) == 1.0
    assert forms.label(CATALOGUE["late-burst"].param("count")) == "count (events)"
    assert forms.label(CATALOGUE["set-fraud-rate"].param("fraud_rate")) == "fraud rate (0–1)"
    assert forms._step(CATALOGUE["set-fraud-rate"].param("fraud_rate")) == 0.001
    assert forms._step(CATALOGUE["late-burst"].param("count")) == 10
    defaults = {str(p.default) for f in CATALOGUE.values() for p in f.params if p.default is not None}

    source = "\n".join(p.read_text() for p in Path(forms.__file__).parent.rglob("*.py"))
    for kind in FAULTS:
        for p in CATALOGUE[kind].params:
            if p.default is not None:  # e.g. "seconds=10", "count=200" nowhere in the dashboard
                assert f"{p.name}={p.default}" not in source.replace(" ", "")
                assert f"{p.name}={p.default:g}" not in source.replace(" ", "")
    assert defaults  # the catalogue has defaults to check


def test_poison_batches_and_dead_letter_send_failures(store):
    assert data.quarantines(store).empty and data.dead_letter_send_failures(store) == 0
    assert data.query_failures(store).empty
    poison = seed_poison(store, NOW)
    q = data.quarantines(store)
    assert len(q) == 1
    row = q.iloc[0]
    assert (row["query"], row["batch_id"], row["failures"], row["dead_lettered"]) == ("fraud", POISON_BATCH, 3, 1)
    assert row["offsets"] == "p0 812–840, p1 790–815"
    assert row["reason"] == poison["reason"] and row["reason"].startswith("poison batch: PoisonPillError: ")
    assert data.dead_letter_send_failures(store) == 1        # the fraud-dlq batch that failed once
    assert list(data.query_failures(store)["action"]) == ["restart", "quarantine", "restart", "restart"]
    # a quarantine whose dead-letter send failed twice, then went through: two more failed sends
    store.conn.execute("UPDATE quarantines SET attempts = 3")
    assert data.dead_letter_send_failures(store) == 3
    store.conn.execute("UPDATE quarantines SET status = 'not reproduced', records = '[]', dead_lettered = 0, attempts = 0")
    assert data.quarantines(store).iloc[0]["reason"].startswith("no record fails on its own: nothing dead-lettered")
    sentence = text.poison_batches(data.quarantines(store), 3)
    assert "fails 3 times in a row" in sentence and "nothing dead-lettered" in sentence


def test_the_faults_page_shows_poison_batches(store, tmp_path, monkeypatch):
    path = tmp_path / "dash.db"
    for name, value in {"CARDSTREAM_DB": str(path), "CHECKPOINT_ROOT": str(tmp_path / "checkpoints"),
                        "DASHBOARD_HOST": "127.0.0.1", "KAFKA_BOOTSTRAP": f"127.0.0.1:{closed_port()}"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("DASHBOARD_TOKEN", raising=False)
    db = connect(path)
    seed_store(db, NOW, checkpoint_root=tmp_path / "checkpoints")
    poison = seed_poison(db, NOW)
    db.conn.close()
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("views/faults.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [s.value for s in at.subheader if s.value == "Poison batches"]
    [table] = [d.value for d in at.dataframe if "Kafka range" in d.value.columns or "offsets" in d.value.columns]
    assert list(table["batch_id"]) == [POISON_BATCH] and list(table["reason"]) == [poison["reason"]]
    assert list(table["dead_lettered"]) == [1] and list(table["status"]) == ["dead-lettered"]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Dead-letter sends failed"] == "1"
    captions = " ".join(c.value for c in at.caption)
    assert "1 record(s) of 1 batch(es) dead-lettered" in captions
