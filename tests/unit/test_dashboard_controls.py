"""The Controls page's query: what the simulator was last asked, per control of the catalogue."""
from __future__ import annotations

from controlplane import commands
from dashboard.data import controls as data
from tests.harness.dashboard_seed import NOW, RATE, seed_store


def test_last_controls(store):
    seed_store(store, NOW)
    last = data.last_controls(store)
    assert data.last_value(last, "set-rate", "rate") == RATE and last["paused"] is False
    assert data.last_value(last, "set-fraud-rate", "fraud_rate") is None
    commands.issue(store, "pause")
    assert data.last_controls(store)["paused"] is True
    commands.issue(store, "resume")
    assert data.last_controls(store)["paused"] is False
    commands.issue(store, "set-fraud-rate", fraud_rate=0.05)
    assert data.last_value(data.last_controls(store), "set-fraud-rate", "fraud_rate") == 0.05


def test_empty_store(store):
    assert data.last_controls(store) == {"paused": False}
