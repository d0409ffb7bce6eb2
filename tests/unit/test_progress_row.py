"""The progress row of a batch whose query keeps state outside Spark's operators (exactly-once's
dedupe): the figures its batch measured (`metrics.note_state`) fill the row Spark posts after it."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from controlplane.store import connect
from pipelines.engine import metrics

pytestmark = pytest.mark.unit


def progress(query: str, batch_id: int):
    return SimpleNamespace(name=query, id="id", batchId=batch_id, numInputRows=10, inputRowsPerSecond=1.0,
                           processedRowsPerSecond=2.0, durationMs={"triggerExecution": 5}, stateOperators=[],
                           sources=[], eventTime={}, observedMetrics={})


def test_a_noted_batch_fills_its_progress_row_and_only_its_own(tmp_path):
    recorder = metrics.ProgressRecorder(tmp_path / "s.db", job="usage")
    metrics.note_state("usage-exactly-once", 3, state_rows=7, state_memory_bytes=4096,
                       watermark=metrics.iso_ms(1_790_000_000_123), event_time_max=None, other=1)
    metrics.note_state("usage-exactly-once", 4, state_rows=9)  # batch 3 never posted: its note goes
    recorder.onQueryProgress(SimpleNamespace(progress=progress("usage-at-least-once", 4)))
    recorder.onQueryProgress(SimpleNamespace(progress=progress("usage-exactly-once", 4)))
    recorder.onQueryProgress(SimpleNamespace(progress=progress("usage-exactly-once", 3)))
    rows = {(r["query"], r["batch_id"]): r for r in connect(tmp_path / "s.db")["batch_progress"].rows}
    assert rows[("usage-exactly-once", 4)]["state_rows"] == 9
    assert rows[("usage-exactly-once", 3)]["state_rows"] == 0 and rows[("usage-exactly-once", 3)]["watermark"] is None
    assert rows[("usage-at-least-once", 4)]["state_rows"] == 0


def test_times_are_written_as_spark_writes_them():
    assert metrics.iso_ms(1_790_000_000_123) == "2026-09-21T14:13:20.123Z"
    assert metrics.iso_ms(None) is None
