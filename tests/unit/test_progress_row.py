"""The progress row of a batch whose query keeps state outside Spark's operators (exactly-once's
dedupe): the figures its batch measured (`metrics.note_state`) fill the row Spark posts after it."""
from __future__ import annotations

import json
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


def test_each_source_is_recorded_by_the_topics_it_reads():
    """The fraud query reads its labels beside its transactions; Spark's numInputRows and
    inputRowsPerSecond sum the two, so the row keeps each source's own figures too."""
    from pyspark.sql.streaming.listener import SourceProgress

    def source(description, end, rows, per_s):
        return SourceProgress.fromJson({"description": description, "startOffset": None, "endOffset": end,
                                        "latestOffset": end, "numInputRows": rows, "inputRowsPerSecond": per_s,
                                        "processedRowsPerSecond": 0.0})

    sources = [source("KafkaV2[Subscribe[transactions]]", {"transactions": {"0": 60, "1": 30}}, 90, 137.1),
               source("KafkaV2[Subscribe[labels]]", {"labels": {"0": 88}}, 88, 130.0),
               source("MemoryStream[value#1]", 3, 2, float("nan")),
               source("KafkaV2[SubscribePattern[t.*]]", {"t1": {"0": 1}, "t2": {"0": 2}}, 0, 0.0)]
    row = metrics.progress_row(SimpleNamespace(**{**vars(progress("fraud", 1)), "sources": sources}), {})
    figures = json.loads(row["sources"])  # strict JSON (SQLite's json_extract reads it): no NaN
    assert figures["transactions"] == {"rows": 90, "per_s": 137.1}
    assert figures["labels"] == {"rows": 88, "per_s": 130.0}
    assert figures["MemoryStream[value#1]"] == {"rows": 2, "per_s": 0.0}
    assert figures["t1,t2"] == {"rows": 0, "per_s": 0.0}
