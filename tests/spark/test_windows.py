"""The windows query's per-batch aggregation (`windows.batch_results`) on a static frame in Spark:
panes, sessions, late rows and decisions without an event time, against plain Python."""
from __future__ import annotations

from pipelines.usage import windows

BASE = 1_700_000_040_000  # a whole minute
S, MIN = 1000, 60_000


def frame(spark, rows):
    # deferred: pyspark (and its JVM) loads only where Spark runs
    from pyspark.sql import functions as F

    df = spark.createDataFrame(rows, "card_id string, event_time long, is_fraud boolean")
    return df.withColumn("event_ts", F.timestamp_millis("event_time"))


def test_batch_results_match_python_and_count_late_rows(spark):
    rows = [("a", BASE + 0 * S, True), ("a", BASE + 20 * S, False), ("b", BASE + 50 * S, False),
            ("a", BASE + 130 * S, True),                               # a new session for a (gap 60 s)
            ("b", BASE - 40 * S, True), ("b", BASE - 90 * S, False),   # behind the watermark: late
            ("c", None, True)]                                          # no event time: in no window
    watermark = BASE - 30 * S
    fixed, sessions, late, max_event = windows.batch_results(frame(spark, rows), watermark, 60)

    assert max_event == BASE + 130 * S
    tumbling = {(w.start, w.end): (w.processed, w.fraud) for w in fixed if w.kind == "tumbling"}
    assert tumbling == {(BASE, BASE + MIN): (3, 1), (BASE + 2 * MIN, BASE + 3 * MIN): (1, 1)}
    sliding = {w.start: (w.processed, w.fraud) for w in fixed if w.kind == "sliding"}
    assert sliding[BASE] == (4, 2) and sliding[BASE - 4 * MIN] == (3, 1) and sliding[BASE + 2 * MIN] == (1, 1)
    assert len(sliding) == 7  # panes BASE and BASE+2min: starts BASE-4min .. BASE+2min
    got_sessions = sorted((w.key, w.start, w.end, w.processed, w.fraud) for w in sessions)
    assert got_sessions == [("a", BASE, BASE + 80 * S, 2, 1), ("a", BASE + 130 * S, BASE + 190 * S, 1, 1),
                            ("b", BASE + 50 * S, BASE + 110 * S, 1, 0)]
    late_by = {(kind, start): n for kind, start, n in late}
    # the two late rows fall in the panes BASE-1min and BASE-2min
    assert late_by[("tumbling", BASE - MIN)] == 1 and late_by[("tumbling", BASE - 2 * MIN)] == 1
    assert late_by[("session", BASE - MIN)] == 1 and late_by[("session", BASE - 2 * MIN)] == 1
    assert sum(n for kind, _, n in late if kind == "sliding") == 2 * 5


def test_without_a_watermark_nothing_is_late(spark):
    rows = [("a", BASE - 10 * MIN, False), ("a", BASE, True)]
    fixed, sessions, late, max_event = windows.batch_results(frame(spark, rows), None, 60)
    assert late == [] and max_event == BASE
    assert sum(w.processed for w in fixed if w.kind == "tumbling") == 2
    assert len(sessions) == 2  # ten minutes apart: two sessions of card a
