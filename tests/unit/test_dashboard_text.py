"""Figures that fit and sentences that say only what was measured (dashboard.fmt, dashboard.views.text)."""
from __future__ import annotations

import pytest

from dashboard import fmt
from dashboard.views import text


@pytest.mark.parametrize("value,shown", [(None, "—"), (float("nan"), "—"), (0, "0"), (7.0, "7"), (12345, "12,345"),
                                         (10386.0, "10,386"), (2.5e6, "2,500,000")])
def test_counts(value, shown):
    assert fmt.count(value) == shown


@pytest.mark.parametrize("value,shown", [(200.0, "200"), (0.0, "0"), (0.04, "0"), (33.84, "33.8"), (34.0, "34"),
                                         (1234.5, "1,234"), (99.95, "100"), (None, "—")])
def test_decimals_drop_a_useless_point_zero(value, shown):
    assert fmt.decimal(value) == shown


@pytest.mark.parametrize("ms,shown", [(6.44, "6.4 ms"), (62.4, "62 ms"), (850, "850 ms"), (999.4, "999 ms"),
                                      (1000, "1.0 s"), (7000, "7.0 s"), (62_400, "62.4 s"), (150_000, "2.5 min"),
                                      (9_000_000, "2.5 h"), (None, "—")])
def test_durations_switch_to_seconds_above_1000_ms(ms, shown):
    assert fmt.duration_ms(ms) == shown


def test_other_figures():
    assert fmt.duration_s(7.4) == "7.4 s" and fmt.percent(0.92) == "92.0 %" and fmt.percent(None) == "—"
    assert fmt.signed(380) == "+380" and fmt.signed(-120) == "−120" and fmt.signed(0) == "0"
    assert fmt.size_bytes(3 * 2**20) == "3.0 MiB" and fmt.size_bytes(512) == "512 B"
    assert fmt.clock(0) == "00:00:00" and fmt.short_id("a7f3c2d1-0000") == "a7f3c2d1" and fmt.short_id(None) == "—"


def test_lag_is_behind_never_lost():
    assert text.behind(200, 1.4) == "behind 200 records (1.4 s)"
    assert text.behind(0, 0.0) == "caught up with its input" and text.behind(None, None) == "caught up with its input"
    row = {"lost": 0, "duplicated": 0, "lag_records": 1_234, "lag_seconds": 5.2}
    assert text.audit_badges(row) == ":green-badge[lost 0 · duplicated 0] :gray-badge[behind 1,234 records (5.2 s)]"


def test_badges_show_lost_only_above_zero_and_duplicates_by_cause():
    row = {"lost": 285, "duplicated": 0, "replayed": 0, "upstream": 0, "lag_records": 0}
    assert text.audit_badges(row).startswith(":red-badge[lost 285]") and "duplicated" not in text.audit_badges(row)
    row = {"lost": 0, "duplicated": 206, "replayed": 200, "upstream": 6, "lag_records": 8, "lag_seconds": 0.2}
    said = text.audit_badges(row)
    assert ":orange-badge[duplicated 206 (200 replayed, 6 upstream)]" in said and "lost" not in said


def test_versus_truth():
    assert text.versus_truth(10_000, 10_000) == "= truth 10,000"
    assert text.versus_truth(9_880, 10_000) == "of truth 10,000" and text.versus_truth(5, None) == "no truth measured yet"


def test_quiet_and_empty_stories():
    assert "no audit yet" in text.quiet(None)
    said = text.quiet({"observed": 100, "truth": 100, "lag_records": 3, "lag_seconds": 0.1})
    assert said == "no loss or duplicate in this time; 100 counted = truth 100, behind 3 records (100 ms)."


def test_causes_tell_a_recovery_with_its_command():
    found = [{"kind": "command", "id": 3, "fault": "crash", "job": "usage", "status": "done", "at": 1_000, "until": 1_002},
             {"kind": "recovery", "job": "usage", "fault": "crash", "at": 1_000, "until": 8_000, "seconds": 7.0},
             {"kind": "start", "job": "usage", "at": 3_000, "until": 3_000}]
    assert text.causes(found) == ["crash #3 on usage at 00:00:01 (batches again 7.0 s after the kill)",
                                  "usage restarted at 00:00:03"]
    assert text.causes(found[1:2]) == ["usage killed by crash at 00:00:01, batches again 7.0 s later"]
    broker = [{"kind": "command", "id": 4, "fault": "broker-down", "job": None, "status": "started", "at": 0, "until": 1}]
    assert text.causes(broker) == ["broker-down #4 on the broker at 00:00:00 (started)"]


def test_params_with_catalogue_units():
    assert text.params("late-burst", {"count": 200}) == "count 200 events"
    assert text.params("set-fraud-rate", {"fraud_rate": 0.025}) == "fraud_rate 0.025"
    assert text.params("crash-after-sink", {"guarantee": "at-least-once"}) == "guarantee at-least-once"
    assert text.params("no-such-kind", {"x": 1}) == "x 1" and text.params("pause", {}) == ""


def test_fraud_job_sentence():
    q = {"decided": 100, "truth": 100, "lost": 0, "topic": 100, "topic_duplicated": 2, "lag_records": 0}
    assert text.fraud_job(q) == ("Fraud job (its own exactly-once sinks): decided 100 of truth 100 in the store, "
                                 "lost 0, 100 distinct in the decisions topic, 2 extra records, caught up with its input.")

def test_causes_say_when_a_warm_standby_took_over():
    rec = {"kind": "recovery", "job": "fraud", "fault": "crash", "at": 1_000, "until": 4_000, "seconds": 3.0,
           "via": "standby"}
    cmd = {"kind": "command", "id": 5, "fault": "crash", "job": "fraud", "status": "done", "at": 1_000, "until": 1_002}
    assert text.causes([cmd, rec]) == ["crash #5 on fraud at 00:00:01 (batches again 3.0 s after the kill, "
                                       "its warm standby took over)"]
    assert text.causes([{**rec, "via": "restart"}]) == ["fraud killed by crash at 00:00:01, batches again 3.0 s later"]


def test_causes_say_a_job_exited_when_no_fault_killed_it():
    rec = {"kind": "recovery", "job": "usage", "fault": "exit", "at": 1_000, "until": 4_000, "seconds": 3.0}
    assert text.causes([rec]) == ["usage exited at 00:00:01, batches again 3.0 s later"]
