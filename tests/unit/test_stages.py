"""Where a batch's time goes: the sink's laps, Spark's parts, one breakdown per batch that adds
up to the trigger's duration, and the Checkpoints page's frame of it."""
from __future__ import annotations

from controlplane.store import connect
from dashboard.data.checkpoints import stage_breakdown
from pipelines.engine.stages import STAGES, Stages, batch_breakdowns, breakdown


def test_laps_accumulate_per_name_and_are_recorded(tmp_path):
    ticks = iter([0.0, 0.120, 0.135, 0.135, 0.160])
    clock = Stages(clock=lambda: next(ticks))
    assert (clock.lap("compute_ms"), clock.lap("decide_ms"), clock.lap("decide_ms"), clock.lap("kafka_ms")) == \
        (120, 15, 15, 25)
    db = connect(tmp_path / "s.db")
    clock.record(db, "fraud", 4, 300)
    (row,) = db["batch_stages"].rows
    assert (row["batch_id"], row["rows"], row["compute_ms"], row["decide_ms"], row["store_ms"], row["kafka_ms"]) == \
        (4, 300, 120, 15, None, 25)


def test_the_breakdown_adds_up_to_the_trigger_and_never_goes_below_it():
    progress = {"duration_ms": 1_000, "trigger_ms": 800, "commit_ms": 90, "offsets_ms": 20, "planning_ms": 30}
    parts = breakdown(progress, {"compute_ms": 600, "decide_ms": 50, "store_ms": 40, "kafka_ms": 70})
    assert list(parts) == [k for k, _ in STAGES] and sum(parts.values()) == 1_000 and parts["other_ms"] == 100
    # no sink laps (an empty batch, or a sink that recorded nothing): addBatch stays whole
    assert breakdown(progress, None)["compute_ms"] == 800
    # parts that overrun the duration (clocks apart): nothing negative
    assert breakdown({**progress, "duration_ms": 100}, None)["other_ms"] == 0


def test_the_page_frame_takes_each_batchs_newest_laps_before_its_progress(tmp_path):
    db = connect(tmp_path / "s.db")
    base = {"query": "fraud", "input_rows_per_s": 1.0, "processed_rows_per_s": 1.0, "commit_ms": 10,
            "offsets_ms": 5, "planning_ms": 5}
    db["batch_progress"].insert_all([{**base, "batch_id": 7, "ts": 1_000, "num_input_rows": 10, "duration_ms": 300,
                                      "trigger_ms": 250},
                                     {**base, "batch_id": 8, "ts": 2_000, "num_input_rows": 0, "duration_ms": 20,
                                      "trigger_ms": 5}])
    db["batch_stages"].insert_all([{"query": "fraud", "batch_id": 7, "ts": 500, "rows": 10, "compute_ms": 100,
                                    "decide_ms": 10, "store_ms": 10, "kafka_ms": 10},    # a run cut short
                                   {"query": "fraud", "batch_id": 7, "ts": 990, "rows": 10, "compute_ms": 200,
                                    "decide_ms": 10, "store_ms": 10, "kafka_ms": 20}])
    split = stage_breakdown(db)
    assert list(split["batch_id"]) == [7]  # the batch without rows is left out
    row = split.iloc[0]
    assert (row["compute_ms"], row["kafka_ms"], row["other_ms"]) == (200, 20, 300 - 5 - 5 - 200 - 10 - 10 - 20 - 10)
    assert stage_breakdown(connect(tmp_path / "empty.db")).empty
    # the same rows for `bench latency`, without pandas
    assert batch_breakdowns(db) == split.drop(columns="time").to_dict("records")
