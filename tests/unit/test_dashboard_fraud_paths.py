"""The Fraud page's two paths on a seeded store (tests/harness/dashboard_seed.seed_fraud_paths: the
fraud job in real-time mode, a crash, the live auditor's own arithmetic): the data module's
figures, the sentence on what the guarantee just did, and the page under Streamlit's AppTest."""
from __future__ import annotations

import pytest

from controlplane.clock import now_ms
from controlplane.store import connect
from dashboard import fmt
from dashboard.data import fraud as data
from dashboard.views import text
from tests.harness.dashboard_seed import NOW, seed_fraud_paths
from tests.unit.test_dashboard_pages import assert_clean, dead_broker, db_path, open_page, text_of  # noqa: F401


@pytest.fixture(scope="module", params=["at-most-once", "at-least-once"])
def crashed(request, tmp_path_factory):
    db = connect(tmp_path_factory.mktemp(request.param) / "cardstream.db")
    seeded = seed_fraud_paths(db, NOW, request.param)
    yield db, seeded
    db.conn.close()


def test_totals_per_path_are_the_auditor_s_slices(crashed):
    db, seeded = crashed
    totals = data.paths_totals(data.paths_series(db, NOW))
    for path in data.PATHS:
        assert (totals[path]["decided"], totals[path]["undecided"]) == (
            seeded.totals[path]["decided"], seeded.totals[path]["undecided"])
    assert totals["real-time"]["p99_ms"] == 8 and totals["stateful"]["p99_ms"] == 2_100


def test_the_crash_s_episode_and_its_sentence(crashed):
    db, seeded = crashed
    [gap] = data.rt_gaps(db, NOW)
    assert gap["killed_at"] == seeded.killed_at and gap["guarantee"] == seeded.guarantee and gap["job"] == "fraud"
    said = text.rt_guarantee_story(gap, data.paths_totals(data.paths_series(db, NOW)), seeded.guarantee)
    if seeded.guarantee == "at-most-once":   # 6 s down at 40 tx/s, none decided by the fast path
        assert gap["undecided"] == 240 and gap["replayed"] == 0 and gap["filled_by_accurate"] == 240
        assert said.startswith("at-most-once skipped 240 transactions during the 7.5 s restart after the crash; "
                               "the accurate path decided all of them, at most 10.2 s after they arrived")
    else:                                   # the batch since the run's start is sent again
        assert gap["undecided"] == 0 and gap["replayed"] == 7_200
        assert said.startswith("at-least-once replayed 7,200 decisions after the 7.5 s restart after the crash, "
                               "leaving none undecided")
    assert f"p99 in the minute after recovery {fmt.duration_ms(gap['p99_after_recovery_ms'])}." in said


def test_quiet_and_micro_batch_runs_say_so(tmp_path):
    db = connect(tmp_path / "quiet.db")
    seed_fraud_paths(db, NOW, "at-least-once", crash=False)
    totals = data.paths_totals(data.paths_series(db, NOW))
    assert data.rt_gaps(db, NOW) == []
    assert text.rt_guarantee_story(None, totals, "at-least-once") == (
        "No kill or restart hit the fraud job in the last 30 minutes: the real-time path (at-least-once) decided "
        f"{fmt.count(totals['real-time']['decided'])} transactions and left none undecided.")
    empty = connect(tmp_path / "empty.db")
    assert data.paths_series(empty, NOW).empty and data.rt_runs(empty).empty and data.rt_fault_marks(empty, NOW).empty
    assert "runs in micro-batch mode" in text.rt_guarantee_story(None, {}, None)


def test_not_back_yet_is_said_with_what_waits():
    gap = {"kind": "crash", "guarantee": "at-most-once", "killed_at": NOW, "recovered_at": None, "undecided": 80}
    assert text.rt_guarantee_story(gap, {}, "at-most-once") == (
        f"at-most-once: since the crash at {fmt.clock(NOW)} the real-time path has decided nothing yet; "
        "80 transactions undecided so far.")


@pytest.mark.parametrize("guarantee", ["at-most-once", "at-least-once"])
def test_the_fraud_page_shows_both_paths_and_the_crash(guarantee, db_path, dead_broker):  # noqa: F811
    db = connect(db_path)
    seeded = seed_fraud_paths(db, now_ms(), guarantee)
    db.conn.close()
    at = open_page("fraud")
    assert_clean(at, "fraud")
    shown = text_of(at)
    assert "Two paths" in shown and "**Real-time path**" in shown and "**Stateful path**" in shown
    # a row of three tiles per path, their labels short enough to show whole (issue 36 item 7)
    labels = [m.label for m in at.metric]
    rows = [labels[i:i + 3] for i, label in enumerate(labels) if label == "Decided" and labels[i + 1] == "Undecided"]
    assert rows == [["Decided", "Undecided", "Latency p99"]] * 2
    said = "at-most-once skipped 240 transactions" if guarantee == "at-most-once" else "at-least-once replayed 7,200"
    assert said in shown
    assert fmt.count(seeded.totals["real-time"]["decided"]) in shown
    # the fast alerts the stateful path confirmed, as the auditor counted them
    totals = data.paths_totals(data.paths_series(connect(db_path), seeded.now))["real-time"]
    assert totals["alerts"] > totals["confirmed"] > 0
    assert text.confirmed_alerts(totals["alerts"], totals["confirmed"]) in shown
    assert len(at.get("plotly_chart")) >= 1


def test_the_confirmed_share_is_said_only_from_counts():
    assert text.confirmed_alerts(None, None).startswith("Fast alerts confirmed: not known yet")
    assert "has been decided by the stateful path yet" in text.confirmed_alerts(0, 0)
    assert text.confirmed_alerts(40, 36) == (
        "Fast alerts confirmed: of the 40 transactions the real-time path flagged in the last 30 minutes and the "
        "stateful path has decided, the stateful path flagged 36 (90.0 %).")
