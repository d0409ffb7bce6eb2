"""The page check both walks use (tests/harness/browser.py) fails on each defect it is there for.

A page laid out as Streamlit lays out its elements (the same data-testid names) with real Plotly
charts (plotly.py's own plotly.min.js), in Debian's Chromium: clean, it passes; with a cut figure,
"nan", "None", a count with ".0", a cut tile label or an empty chart with no sentence, the check names
the defect; and the sidebar's Kafka badge is read, red counting as a defect while a broker runs.
"""
from __future__ import annotations

import html
from pathlib import Path

import plotly
import pytest

from tests.harness.browser import badge_defects, chromium, kafka_badge, page_defects

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def metric(value: str, width: int = 220) -> str:
    return (f'<div data-testid="stMetricValue" style="width:{width}px;font-size:36px">'
            f'<div style="overflow:hidden;white-space:nowrap;text-overflow:ellipsis">{html.escape(value)}</div></div>')


def label(text: str, width: int = 220) -> str:
    """A tile's label as Streamlit lays it out: one line, cut with an ellipsis when it does not fit."""
    return (f'<div data-testid="stMetricLabel" style="width:{width}px;font-size:14px">'
            f'<div style="overflow:hidden;white-space:nowrap;text-overflow:ellipsis">{html.escape(text)}</div></div>')


def chart(div_id: str, before: str = "", after: str = "") -> str:
    box = lambda inner: f'<div data-testid="stElementContainer">{inner}</div>'  # noqa: E731
    return ((box(f"<p>{html.escape(before)}</p>") if before else "") + box(f'<div id="{div_id}"></div>')
            + (box(f"<p>{html.escape(after)}</p>") if after else ""))


def draw(page, metrics: list[str], text: str, charts: dict[str, list], sentences: dict[str, tuple] | None = None):
    body = "".join(metrics) + f"<p>{html.escape(text)}</p>"
    body += "".join(chart(cid, *(sentences or {}).get(cid, ())) for cid in charts)
    page.evaluate("body => { document.querySelector('[data-testid=stMain]').innerHTML = body; }", body)
    for cid, traces in charts.items():
        page.evaluate("([id, traces]) => Plotly.newPlot(id, traces, {title: {text: 'chart ' + id}})", [cid, traces])


LINE = [{"x": [1, 2, 3], "y": [4, 5, 6], "type": "scatter"}]
EMPTY = [{"x": [], "y": [], "type": "scatter"}]


@pytest.fixture(scope="module")
def page():
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.set_content('<html><body><div data-testid="stMain"></div></body></html>')
        page.add_script_tag(path=str(PLOTLY_JS))  # once: 4 MB of JavaScript
        yield page


def test_a_clean_page_passes(page):
    draw(page, [label("Real-time: undecided"), metric("1,234"), metric("6.4 ms"), metric("—")], "behind 1,234 records; p99 7.0 s.",
         {"a": LINE, "b": [{"type": "bar", "x": ["x"], "y": [0]}], "c": EMPTY},
         {"c": ("", "No data yet: the auditor has not compared any count.")})
    assert page_defects(page) == []


@pytest.mark.parametrize("metrics,text,charts,defect", [
    ([metric("12,345,678,901 transactions", width=120)], "", {}, "figure cut short"),
    ([metric("12 tx…")], "", {}, "figure cut short"),
    ([label("Real-time: undecided", width=90)], "", {}, "label cut short: 'Real-time: undecided'"),
    ([label("Stateful: deci…")], "", {}, "label cut short"),
    ([metric("nan")], "", {}, "figure missing"),
    ([metric("1,234.0")], "", {}, "count with .0: '1,234.0'"),
    ([], "lag: None behind", {}, "missing value in the text"),
    ([], "the rate is nan today", {}, "missing value in the text"),
    ([], "behind 1,234.0 records", {}, "count with .0 in the text"),
    ([], "", {"a": EMPTY}, "empty chart with no sentence"),
    ([], "", {"a": []}, "empty chart with no sentence"),
], ids=["cut-by-width", "ellipsis", "label-cut-by-width", "label-ellipsis", "nan-figure", "point-zero-figure", "None-in-text", "nan-in-text",
        "point-zero-count-in-text", "empty-trace", "no-trace"])
def test_each_defect_is_named(page, metrics, text, charts, defect):
    draw(page, metrics, text, charts)
    found = page_defects(page)
    assert any(defect in d for d in found), found


def test_a_chart_left_undrawn_is_named(page):
    page.evaluate("""() => { document.querySelector('[data-testid=stMain]').innerHTML =
        '<div data-testid="stElementContainer"><div class="js-plotly-plot"></div></div>'; }""")
    assert [d for d in page_defects(page) if d.startswith("chart not drawn")], page_defects(page)


def sidebar_badge(page, kind: str, text: str) -> None:
    """The sidebar's Kafka badge as Streamlit draws an alert: an icon, then the markdown text."""
    page.evaluate("""([kind, text]) => {
        let bar = document.querySelector('[data-testid=stSidebar]');
        if (!bar) { bar = document.createElement('section'); bar.setAttribute('data-testid', 'stSidebar');
                    document.body.prepend(bar); }
        bar.innerHTML = `<div data-testid="stAlertContainer"><div data-testid="stAlertContent${kind}">
            <span>cloud_off</span><div data-testid="stMarkdownContainer"><p>${text}</p></div></div></div>`;
    }""", [kind, text])


@pytest.mark.parametrize("kind,text,defect", [
    ("Success", "Kafka up · 127.0.0.1:9092", None),
    ("Warning", "Kafka not answering within 1.5 s · 127.0.0.1:9092 took the connection but sent no answer", None),
    ("Error", "Kafka broker down · 127.0.0.1:9092 refused the connection (3 tries): nothing listens there",
     "Kafka badge red while the broker runs"),
], ids=["up", "not-answering", "refused"])
def test_the_kafka_badge_is_read_and_red_is_a_defect_while_the_broker_runs(page, kind, text, defect):
    sidebar_badge(page, kind, text)
    assert kafka_badge(page) == (kind.lower(), text)
    found = badge_defects(page)
    assert (found == []) if defect is None else (len(found) == 1 and found[0].startswith(defect)), found


def test_no_badge_is_a_defect(page):
    page.evaluate("() => document.querySelector('[data-testid=stSidebar]')?.remove()")
    assert kafka_badge(page) is None and badge_defects(page) == ["no Kafka badge in the sidebar"]
