"""What make demo's first minutes showed wrong on the time charts (2026-11-29): a bar alone on a time
axis is drawn as wide as its bucket (Plotly sizes bars by the gaps between them and drew a new
run's first 5 s of decisions, one bar, too thin to see), and a latency axis over decades is ticked at
powers of ten alone."""
from __future__ import annotations

import pandas as pd
import pytest

from dashboard import charts
from dashboard.data import overview as data

T = 1_795_952_000_000


def series(buckets: int) -> pd.DataFrame:
    pairs = [(T + b * 5_000 + i - 300, T + b * 5_000 + i) for b in range(buckets) for i in range(50)]
    return data.latency_series(data.latency_frame(pairs))


def bars(fig):
    return [t for t in fig.data if t.type == "bar"]


@pytest.mark.parametrize("build", [lambda s: charts.throughput(s),
                                   lambda s: charts.overview_timeline(s, 20, pd.DataFrame(), None)])
def test_a_lone_decisions_bar_is_as_wide_as_most_of_its_bucket(build):
    (bar,) = bars(build(series(1)))
    assert bar.width == pytest.approx(0.8 * data.BUCKET_S * 1000)
    (bar,) = bars(build(series(3)))
    assert bar.width is None  # Plotly's own, from the gaps


def test_a_lone_window_and_a_lone_arrival_slice_too():
    start = T - 60_000
    df = pd.DataFrame({"kind": ["tumbling"] * 2, "key": ["all", "all"], "window_start": [start] * 2,
                       "window_end": [start + 10_000] * 2, "processed": [5, 7], "fraud": [0, 1]})
    df["start"] = pd.to_datetime(df["window_start"], unit="ms")
    assert bars(charts.windows(df, "tumbling"))[0].width == pytest.approx(8_000)
    paths = pd.DataFrame({"path": ["stateful"], "time": [pd.Timestamp(T, unit="ms")], "undecided": [3],
                          "p99_ms": [900]})
    fig = charts.fraud_paths(paths, pd.DataFrame(), bucket_s=2)
    assert bars(fig)[0].width == pytest.approx(1_600) and "per 2 s of arrival" in fig.layout.annotations[0].text


def test_a_log_axis_over_decades_is_ticked_at_powers_of_ten_alone():
    """The two paths' p99: milliseconds and tens of seconds on one log axis; Plotly's 2s and 5s
    between the decades read as latencies. Within one decade Plotly's own ticks stay."""
    times = [pd.Timestamp(T + i * 5_000, unit="ms") for i in range(2)]
    wide = pd.DataFrame({"path": ["real-time", "stateful"], "time": times, "undecided": [0, 1], "p99_ms": [12, 30_000]})
    narrow = wide.assign(p99_ms=[12_000, 30_000])
    assert charts.fraud_paths(wide, pd.DataFrame()).layout.yaxis2.dtick == 1
    assert charts.fraud_paths(narrow, pd.DataFrame()).layout.yaxis2.dtick is None
