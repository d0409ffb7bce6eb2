"""`bench charts`' figures from a page's samples (bench/charts.py `summary`)."""
from __future__ import annotations

from bench.charts import summary


def test_a_page_s_samples_give_its_blank_share_and_rebuilds():
    samples = [{"shown": 3, "drawn": 3, "fresh": 3},   # the page as loaded: its charts seen first, not rebuilt
               {"shown": 4, "drawn": 2, "fresh": 1},   # a chart's new element beside its old one, two undrawn
               {"shown": 3, "drawn": 3, "fresh": 0},
               {"shown": 3, "drawn": 2, "fresh": 1}]
    assert summary(samples) == {"charts": 4, "blank_share": 0.5, "mean_blank": 0.75, "rebuilt": 2, "samples": 4}


def test_a_page_without_a_chart_has_no_share():
    assert summary([]) == {"charts": 0, "blank_share": None, "mean_blank": None, "rebuilt": 0, "samples": 0}
