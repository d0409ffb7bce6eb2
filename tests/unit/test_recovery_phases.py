"""Where a recovery's seconds went (kill -> lease -> first batch started -> committed), as the
supervisor records it and `bench recovery` sums it up."""
from __future__ import annotations

import pandas as pd

from bench.recovery import median_phases
from controlplane.store import connect
from dashboard.data.faults import recoveries
from pipelines.supervisor.faults import phases

KILL = 1_900_000_000_000


def test_the_phases_add_up_to_the_recovery():
    got = phases(KILL, KILL + 1_500, KILL + 9_000, 4_000)
    assert got == {"to_lease_s": 1.5, "to_batch_s": 3.5, "batch_s": 4.0}
    assert sum(got.values()) == 9.0  # the recovery's seconds: kill to the batch's commit


def test_a_lease_not_taken_by_the_recovering_instance_tells_no_lease_phase():
    # a lease from before the kill (the recovering instance never took one) or after the batch started
    for lease in (KILL - 10, KILL + 8_000, None):
        got = phases(KILL, lease, KILL + 9_000, 4_000)
        assert got["to_lease_s"] is None and got["to_batch_s"] is None and got["batch_s"] == 4.0
    assert phases(KILL, KILL + 10, KILL + 9_000, None)["batch_s"] is None


def test_the_recoveries_table_keeps_the_phases_and_the_bench_takes_their_medians(tmp_path):
    db = connect(tmp_path / "store.db")
    for i, p in enumerate([phases(KILL, KILL + 1_000, KILL + 10_000, 5_000),
                           phases(KILL, KILL + 3_000, KILL + 12_000, 2_000),
                           phases(KILL, None, KILL + 12_000, 7_000)]):
        db["recoveries"].insert({"job": "fraud", "fault": "crash", "killed_at": KILL, "recovered_at": KILL + 1,
                                 "seconds": 10.0 + i, "via": "standby", "command_id": i, **p})
    rows = list(db["recoveries"].rows_where("job = ?", ["fraud"]))
    assert median_phases(rows) == {"to_lease_s": 2.0, "to_batch_s": 5.5, "batch_s": 5.0}
    assert median_phases([]) == {"to_lease_s": None, "to_batch_s": None, "batch_s": None}


def test_the_recovery_chart_stacks_the_phases_and_marks_what_was_not_broken_down(tmp_path):
    # deferred: plotly only where a chart is drawn
    from dashboard import charts

    db = connect(tmp_path / "store.db")
    db["recoveries"].insert({"job": "fraud", "fault": "crash", "killed_at": KILL, "recovered_at": KILL + 9_000,
                             "seconds": 9.0, "via": "standby", "command_id": 1,
                             **phases(KILL, KILL + 1_500, KILL + 9_000, 4_000)})
    db["recoveries"].insert({"job": "usage", "fault": "exit", "killed_at": KILL + 60_000,
                             "recovered_at": KILL + 90_000, "seconds": 30.0, "via": "restart", "command_id": None,
                             **phases(KILL + 60_000, KILL, KILL + 90_000, 2_000)})  # lease from before the kill
    fig = charts.recoveries(recoveries(db))
    bars = {t.name: list(pd.Series(t.y).fillna(-1)) for t in fig.data if t.type == "bar"}
    (lease, start, batch) = (next(v for k, v in bars.items() if k.startswith(p)) for p in ("to the lease", "to the first", "first batch"))
    assert (lease, start, batch) == ([1.5, -1], [3.5, -1], [4.0, -1])
    assert bars["not broken down"] == [-1, 30.0]
    labels = list(fig.data[0].x)
    assert labels[0].startswith("fraud · standby · crash") and labels[1].startswith("usage · restart · exit")
    (totals,) = [t for t in fig.data if t.type == "scatter"]
    assert list(totals.text) == ["9.0 s", "30.0 s"]
