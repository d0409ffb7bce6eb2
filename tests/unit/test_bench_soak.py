"""`bench soak`'s plain parts: the fault cycle, the memory figures from the supervisor's samples
(first, minute 10, last, growth; a run under 10 minutes from minute 1), the verdict on the audit."""
from __future__ import annotations

import pytest

from bench import soak

T0 = 1_900_000_000_000
MIN = 60_000


def test_the_fault_cycle_and_its_targets():
    kinds = [soak.fault_at(i) for i in range(10)]
    assert [k for k, _ in kinds[:5]] == ["sink-down", "task-failure", "crash-after-sink", "broker-down", "crash"]
    assert kinds[2] == ("crash-after-sink", "usage") and kinds[4] == ("crash", "usage")
    assert kinds[7] == ("crash-after-sink", "fraud") and kinds[9] == ("crash", "fraud")  # the next cycle
    assert kinds[0] == ("sink-down", None) and kinds[3] == ("broker-down", None)  # the catalogue's defaults


def samples(minutes, grow_from=None):
    """A sample a minute (a little after it, as the housekeeper's clock runs) for two roles."""
    rows = []
    for m in range(minutes + 1):
        ts = T0 + m * MIN + 1500
        rows.append((ts, "fraud-jvm", 7, 1000.0 + (10.0 * m if grow_from is not None and m >= grow_from else 0)))
        rows.append((ts, "usage", 8 if m < 30 else 9, 150.0))
    rows.append((T0 + (minutes + 5) * MIN, "usage", 9, 1.0))  # after the soak: the drain, left out
    return rows


def test_an_hour_grows_from_minute_10_to_the_last_sample():
    figs = soak.memory_figures(samples(60, grow_from=11), T0, 60)
    assert figs["growth_from_minute"] == 10
    assert figs["rss_mb"]["fraud-jvm"] == [1000, 1000, 1600]
    assert figs["growth_pct"]["fraud-jvm"] == 60.0 and figs["growth_pct"]["usage"] == 0.0
    assert figs["pids"] == {"fraud-jvm": 1, "usage": 2}  # usage's role changed process at minute 30
    # per process: fraud-jvm's one pid from minute 10 to 60; usage's pid 8 from 10 to 29, pid 9
    # from minute 40 (10 into its life) to 60, each flat
    assert figs["process_growth_pct"]["fraud-jvm"] == {"pct": 60.0, "pid": 7, "minutes": 50}
    assert figs["process_growth_pct"]["usage"]["pct"] == 0.0


def test_per_process_growth_never_compares_two_processes():
    rows = [(T0 + m * MIN + 1500, "usage", 8, 150.0) for m in range(0, 30)]
    rows += [(T0 + m * MIN + 1500, "usage", 9, 400.0 + m) for m in range(30, 45)]   # took over at 30: 15 min
    figs = soak.memory_figures(rows, T0, 45)
    assert figs["growth_pct"]["usage"] > 100        # the role's line compares pid 8 with pid 9
    # pid 8: minute 10 to 29; pid 9: from minute 40 only 4 minutes of samples: too short to judge
    assert figs["process_growth_pct"]["usage"] == {"pct": 0.0, "pid": 8, "minutes": 19}
    short = soak.memory_figures(rows[:12], T0, 12)
    assert short["process_growth_pct"]["usage"] is None   # minute 10 to 11 is under 10 minutes


def test_a_short_run_grows_from_minute_1_and_says_so():
    figs = soak.memory_figures(samples(4, grow_from=0), T0, 4)
    assert figs["growth_from_minute"] == 1
    assert figs["rss_mb"]["fraud-jvm"] == [1000, 1040, 1040]  # at_10_min is the last sample
    assert figs["growth_pct"]["fraud-jvm"] == pytest.approx(round(30 / 1010 * 100, 1))


def test_one_sample_has_no_growth():
    figs = soak.memory_figures([(T0 + 5000, "dashboard", 3, 180.0)], T0, 4)
    assert figs["rss_mb"]["dashboard"] == [180, 180, 180] and figs["growth_pct"]["dashboard"] is None


def test_the_verdict_is_exact_only_with_nothing_lost_or_duplicated():
    ok = {"usage_exactly_once": {"truth": 9000, "lost": 0, "duplicated": 0, "lag_records": 12},
          "fraud": {"truth": 9100, "lost": 0, "duplicated": 0}}
    assert soak.verdict(ok) == (True, "exact: lost 0, duplicated 0 (usage exactly-once truth 9,000, fraud 9,100)")
    bad = {"usage_exactly_once": {"truth": 10, "lost": 0, "duplicated": 3}, "fraud": {"truth": 10, "lost": 2, "duplicated": 0}}
    assert soak.verdict(bad) == (False, "usage exactly-once duplicated 3; fraud lost 2")
    empty = {"usage_exactly_once": {"truth": 0, "lost": 0, "duplicated": 0}, "fraud": {"truth": 0, "lost": 0}}
    assert soak.verdict(empty) == (False, "usage exactly-once: nothing audited (truth 0); fraud: nothing audited (truth 0)")


def test_the_progress_line():
    line = soak.progress_line(3, {"fraud": 201.4, "fraud-jvm": 1020.0}, [{"status": "done"}, {"status": "pending"}])
    assert line == "minute 3: RSS MB fraud 201, fraud-jvm 1,020; faults issued 2 (1 done)"
    assert "no sample yet" in soak.progress_line(1, {}, [])
    assert soak.mib(None) == "—" and soak.mib(3 * 2**20) == "3.0 MiB"
