"""Every chart's look is plotly_white's (dashboard/charts.py `_lean`): the template a figure takes
as it is made holds plotly_white's layout and its defaults for every trace type the charts draw."""
from __future__ import annotations

import inspect
import re

import pandas as pd
import plotly.io as pio
import pytest

from dashboard import charts


def test_the_charts_draw_only_the_trace_types_their_template_holds():
    used = {name.lower() for name in re.findall(r"\bgo\.([A-Z][A-Za-z]*)\(", inspect.getsource(charts))}
    used -= {"figure"}
    assert used and used <= set(charts.TRACES), used - set(charts.TRACES)


@pytest.fixture(params=["the charts' own", "Streamlit's"])
def default(request):
    """Plotly's default template as the charts find it: theirs, or Streamlit's, set by Streamlit's own
    theme setup (it runs as Streamlit is imported: in the server before the charts, in a test
    process maybe after them). Put back as it was afterwards."""
    before = pio.templates.default
    if request.param == "Streamlit's":
        from streamlit.elements.lib.streamlit_plotly_theme import configure_streamlit_plotly_theme

        configure_streamlit_plotly_theme()
        assert pio.templates.default != charts.TEMPLATE
    else:
        pio.templates.default = charts.TEMPLATE
    yield request.param
    pio.templates.default = before


def test_a_chart_looks_as_plotly_white_draws_it(default):
    white = pio.templates["plotly_white"]
    df = pd.DataFrame({"time": pd.to_datetime([0, 1_000], unit="ms"), "query": "fraud", "duration_ms": [5, 7]})
    template = charts.per_query(df, "duration_ms", "Batch duration", "ms").layout.template
    for key in ("plot_bgcolor", "paper_bgcolor", "colorway", "font", "xaxis", "yaxis", "hoverlabel"):
        assert template.layout[key] == white.layout[key], key
    for kind in charts.TRACES:
        assert template.data[kind] == white.data[kind], kind
    assert not template.layout.polar.to_plotly_json()  # what the charts never draw is left out
