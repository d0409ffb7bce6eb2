"""Every chart's look is plotly_white's (dashboard/charts.py `_lean`): the template a figure takes
as it is made holds plotly_white's layout and its defaults for every trace type the charts draw."""
from __future__ import annotations

import inspect
import re

import pandas as pd
import pytest
import plotly.io as pio

from dashboard import charts


def test_the_charts_draw_only_the_trace_types_their_template_holds():
    used = {name.lower() for name in re.findall(r"\bgo\.([A-Z][A-Za-z]*)\(", inspect.getsource(charts))}
    used -= {"figure"}
    assert used and used <= set(charts.TRACES), used - set(charts.TRACES)


@pytest.mark.parametrize("default", [charts.TEMPLATE, "plotly"])
def test_a_chart_looks_as_plotly_white_draws_it(default, monkeypatch):
    """`default`: Plotly's default template as the charts find it (Streamlit sets its own when it is
    imported, so in a test process imported after the charts, it is not theirs)."""
    monkeypatch.setattr(pio.templates, "default", default)
    white = pio.templates["plotly_white"]
    df = pd.DataFrame({"time": pd.to_datetime([0, 1_000], unit="ms"), "query": "fraud", "duration_ms": [5, 7]})
    template = charts.per_query(df, "duration_ms", "Batch duration", "ms").layout.template
    for key in ("plot_bgcolor", "paper_bgcolor", "colorway", "font", "xaxis", "yaxis", "hoverlabel"):
        assert template.layout[key] == white.layout[key], key
    for kind in charts.TRACES:
        assert template.data[kind] == white.data[kind], kind
    assert not template.layout.polar.to_plotly_json()  # what the charts never draw is left out
