"""The progress row the listener stores for each batch (`metrics.progress_row`): each source's own figures."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from pipelines.engine import metrics

pytestmark = pytest.mark.unit


def progress(query: str, batch_id: int):
    return SimpleNamespace(name=query, id="id", batchId=batch_id, numInputRows=10, inputRowsPerSecond=1.0,
                           processedRowsPerSecond=2.0, durationMs={"triggerExecution": 5}, stateOperators=[],
                           sources=[], eventTime={}, observedMetrics={})


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
