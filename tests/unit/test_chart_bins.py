"""A long series is drawn in bins of time (dashboard/charts.py `bin_seconds`, `binned`): each trace at
most MAX_POINTS points, a spike kept (the longest per bin), a total kept (the sum per bin), the newest
value kept (state, memory), and the chart's title says the bin. A short series is drawn as it is."""
from __future__ import annotations

import pandas as pd
import pytest

from dashboard import charts

T0 = pd.Timestamp("2026-11-29 10:00", tz="UTC")


def batches(minutes: float = 15, every_s: dict | None = None) -> pd.DataFrame:
    """What dashboard.data.checkpoints.batches gives for make demo's queries at their triggers."""
    rows = []
    for query, step in (every_s or {"fraud": 0.5, "usage-exactly-once": 5.0}).items():
        for i in range(int(minutes * 60 / step)):
            rows.append({"query": query, "time": T0 + pd.Timedelta(seconds=i * step), "duration_ms": 100 + i % 7,
                         "commit_ms": 10.0, "state_rows": i, "state_memory_bytes": i * 1024.0,
                         "input_rows_per_s": 40.0, "processed_rows_per_s": 80.0 + i % 3,
                         "watermark_gap_s": 2.0, "state_rows_removed": 1.0, "state_rows_dropped_late": float(i % 2)})
    return pd.DataFrame(rows).sort_values("time").reset_index(drop=True)


def test_bins_are_the_shortest_step_that_fits():
    times = pd.Series(T0 + pd.to_timedelta(range(1_800), unit="s") / 2)  # 900 s, every 0.5 s
    assert charts.bin_seconds(times) == 5  # 900 / 2 = 450 bins > 300; 900 / 5 = 180
    assert charts.bin_seconds(times[:300]) is None
    assert charts.bin_seconds(times, densest=200) is None
    assert charts.bin_seconds(pd.Series(T0 + pd.to_timedelta(range(100_000), unit="s"))) == 600


def test_a_long_series_is_drawn_in_bins_keeping_its_spike():
    df = batches()
    df.loc[(df["query"] == "fraud") & (df["time"] == T0 + pd.Timedelta(seconds=431.5)), "duration_ms"] = 9_000
    fig = charts.per_query(df, "duration_ms", "Batch duration", "duration (ms)")
    assert fig.layout.title.text == "Batch duration · the longest per 5 s"
    by_name = {t.name: t for t in fig.data}
    assert all(len(t.x) <= charts.MAX_POINTS for t in fig.data)
    assert len(by_name["fraud"].x) == 180 and max(by_name["fraud"].y) == 9_000
    assert len(by_name["usage-exactly-once"].x) == 180  # already one point per 5 s: the same points


def test_state_keeps_each_bin_s_newest_and_health_keeps_the_totals():
    df = batches()
    fig = charts.state(df)
    rows = [t for t in fig.data if t.name == "fraud" and t.yaxis == "y"][0]
    assert rows.y[-1] == df.loc[df["query"] == "fraud", "state_rows"].iloc[-1]
    assert "the newest per 5 s" in fig.layout.title.text
    fraud = df[df["query"] == "fraud"]
    health = charts.query_health(fraud, "fraud")
    dropped = next(t for t in health.data if t.name == "dropped late")
    assert len(dropped.x) <= charts.MAX_POINTS and sum(dropped.y) == fraud["state_rows_dropped_late"].sum()
    assert health.layout.title.text.endswith("· batches per 5 s")


def test_memory_keeps_the_newest_sample_and_its_pid():
    times = T0 + pd.to_timedelta(range(0, 24 * 3600, 60), unit="s")  # a day of samples, a minute apart
    df = pd.concat([pd.DataFrame({"time": times, "ts": 0, "process": p, "pid": pid, "rss_mb": range(len(times))})
                    for p, pid in (("fraud", 11), ("broker", 12))]).sort_values("time").reset_index(drop=True)
    df.loc[df.index[-1], "pid"] = 99  # the last sample of the last process: a new pid after a takeover
    fig = charts.process_memory(df)
    assert all(len(t.x) <= charts.MAX_POINTS for t in fig.data) and "the newest per 300 s" in fig.layout.title.text
    last = next(t for t in fig.data if t.name == df.loc[df.index[-1], "process"])
    assert last.y[-1] == len(times) - 1 and last.customdata[-1] == 99


@pytest.mark.parametrize("minutes", [1, 2])
def test_a_short_series_is_drawn_as_it_is(minutes):
    df = batches(minutes)
    fig = charts.per_query(df, "duration_ms", "Batch duration", "duration (ms)")
    assert fig.layout.title.text == "Batch duration"
    assert sorted(len(t.x) for t in fig.data) == sorted(df.groupby("query").size())
