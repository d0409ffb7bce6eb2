"""A chart with new data is rebuilt at most every DASHBOARD_CHART_SECONDS (dashboard/ui.py `chart`):
the rule alone, then a real page (Streamlit's AppTest) whose store gains a batch between two runs."""
from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from controlplane.clock import now_ms
from controlplane.store import connect
from dashboard.ui import Drawn, redraw, refresh_sentence, shows
from tests.unit.test_dashboard_pages import db_path, dead_broker, open_page, seed  # noqa: F401


def figure(title: str, *names: str) -> go.Figure:
    fig = go.Figure([go.Scatter(x=[1, 2], y=[3, 4], name=n) for n in names])
    return fig.update_layout(title=title)


def test_a_chart_is_sent_again_as_it_was_until_its_time_has_passed():
    seen = shows(figure("Batch duration", "fraud"))
    last = Drawn(at=100.0, shows=seen, figure=None)
    assert redraw(None, 100.0, 10.0, seen)             # never drawn: drawn now
    assert not redraw(last, 109.9, 10.0, seen)         # new data within the period: the last figure again
    assert redraw(last, 110.0, 10.0, seen)             # the period passed: the new figure
    assert redraw(last, 100.5, 0.0, seen)              # DASHBOARD_CHART_SECONDS=0: every refresh


def test_a_chart_showing_something_else_is_drawn_at_once():
    last = Drawn(at=100.0, shows=shows(figure("Batch duration", "fraud")), figure=None)
    assert redraw(last, 101.0, 10.0, shows(figure("Batch duration", "fraud", "usage-exactly-once")))
    assert redraw(last, 101.0, 10.0, shows(figure("Checkpoint time", "fraud")))
    assert shows(figure("Batch duration", "fraud")) == shows(go.Figure(figure("Batch duration", "fraud")))


def test_the_sidebar_says_how_often_charts_are_redrawn(monkeypatch):
    monkeypatch.setenv("DASHBOARD_REFRESH_SECONDS", "2")
    monkeypatch.setenv("DASHBOARD_CHART_SECONDS", "10")
    assert refresh_sentence() == "Refresh every 2 s; a chart with new data every 10 s"
    monkeypatch.setenv("DASHBOARD_CHART_SECONDS", "0")
    assert refresh_sentence() == "Refresh every 2 s"


def add_batch(db_path) -> int:
    """The store's newest fraud batch again as the next one, now, ten times as long: its duration."""
    db = connect(db_path)
    try:
        with db.conn:
            db.conn.execute("CREATE TEMP TABLE b AS SELECT * FROM batch_progress WHERE query = 'fraud' "
                            "ORDER BY batch_id DESC LIMIT 1")
            db.conn.execute("UPDATE b SET batch_id = batch_id + 1, ts = ?, duration_ms = duration_ms * 10 + 7777",
                            (now_ms(),))
            db.conn.execute("INSERT INTO batch_progress SELECT * FROM b")
            return db.conn.execute("SELECT duration_ms FROM b").fetchone()[0]
    finally:
        db.conn.close()


def duration_chart(at) -> dict:
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return next(s for s in specs if "Batch duration" in json.dumps(s["layout"].get("title")))


@pytest.mark.parametrize("every, rebuilt", [("600", False), ("0", True)])  # 600: a slow host's rerun stays inside it
def test_the_checkpoints_page_holds_its_chart_while_the_table_beside_it_moves_on(db_path, dead_broker,  # noqa: F811
                                                                                  monkeypatch, every, rebuilt):
    monkeypatch.setenv("DASHBOARD_CHART_SECONDS", every)
    monkeypatch.setenv("DASHBOARD_REFRESH_SECONDS", "2")
    seed(db_path)
    at = open_page("checkpoints")
    before = duration_chart(at)
    duration = add_batch(db_path)
    at.run()
    assert not at.exception
    history = next(d.value for d in at.dataframe if "duration_ms" in d.value.columns and "batch_id" in d.value.columns)
    assert (history["duration_ms"] == duration).any()  # the table beside the chart shows the new batch at once
    said = "a chart with new data every 600 s" if not rebuilt else "Refresh every 2 s"
    assert any(said in c.value for c in at.sidebar.caption)  # and the sidebar says how often charts move
    assert (duration_chart(at) != before) is rebuilt
