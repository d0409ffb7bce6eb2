"""The contract's replay and place rules in Spark SQL (pipelines/engine/sources.py) on static frames
shaped like the Kafka source with its headers (`includeHeaders`): a 2018 transaction carrying the
replay header is valid, the same without it is too old; the unit checks hold against the replay's
range; produced_at keeps the live rule; a transaction without a place is valid, one coordinate
alone is a missing field. Every verdict is the Python mirror's too (`dead_letter_reason`)."""
from __future__ import annotations

import json
from datetime import datetime, timezone

from infra.contracts import dead_letter_reason
from infra.histories import HISTORY_MIN_EVENT_TIME_MS, REPLAY_HEADER
from pipelines.engine.sources import parse_transactions

NOW = 1_764_000_000_000                 # the records' Kafka append time (2025-11-24)
OLD = 1_522_540_831_000                 # 2018-04-01 00:00:31, the handbook's first payment
KAFKA_DDL = ("value binary, partition int, offset long, timestamp timestamp, "
             "headers array<struct<key: string, value: binary>>")
REPLAY = [(REPLAY_HEADER, b"replay-test")]


def txn(**changes) -> bytes:
    doc = {"txn_id": "hb-0", "card_id": "hb-c596", "merchant_id": "hb-t3156", "amount_cents": 5716,
           "currency": "EUR", "event_time": OLD, "produced_at": NOW - 5}
    doc.update(changes)
    return json.dumps({k: v for k, v in doc.items() if v is not ...}).encode()


def verdicts(spark, settings, cases: list[tuple[bytes, list | None]]) -> list[str | None]:
    ts = datetime.fromtimestamp(NOW / 1000, timezone.utc)
    frame = spark.createDataFrame([(v, 0, i, ts, h) for i, (v, h) in enumerate(cases)], KAFKA_DDL)
    rows = sorted(parse_transactions(frame, settings).collect(), key=lambda r: r.offset)
    assert len(rows) == len(cases)
    out = []
    for (value, headers), row in zip(cases, rows):
        replay = any(k == REPLAY_HEADER for k, _ in headers or [])
        mirror = dead_letter_reason(value, now_ms=NOW, past_ms=settings.validation_past_seconds * 1000,
                                    future_ms=settings.validation_future_seconds * 1000, replay=replay)
        assert row.dlq_reason == mirror, (value, headers, row.dlq_reason, mirror)
        out.append(row.dlq_reason)
    return out


def test_a_replayed_2018_transaction_is_valid_and_the_same_live_one_too_old(spark, settings):
    cases = [
        (txn(), REPLAY),                                       # the replay's header: valid
        (txn(), None),                                         # no header: live rules
        (txn(), [("other", b"x")]),                            # another header: live rules
        (txn(), [("other", b"x"), (REPLAY_HEADER, b"r")]),     # the header among others
        (txn(event_time=HISTORY_MIN_EVENT_TIME_MS), REPLAY),   # 2000-01-01: the replay's earliest
        (txn(event_time=HISTORY_MIN_EVENT_TIME_MS - 1), REPLAY),
        (txn(event_time=OLD // 1000), REPLAY),                 # the unit checks, against the replay's range
        (txn(event_time=OLD * 1000), REPLAY),
        (txn(event_time=OLD * 1_000_000), REPLAY),
        (txn(event_time=NOW + 300_001), REPLAY),               # not ahead of the append time
        (txn(event_time=OLD + 0.5), REPLAY),
        (txn(produced_at=OLD), REPLAY),                        # produced_at keeps the live window
        (txn(amount_cents=0), REPLAY),                         # a history's zero amount
        (txn(amount_cents=0, event_time=NOW - 1), None),       # live: out of range
        (txn(amount_cents=-1), REPLAY),
    ]
    assert verdicts(spark, settings, cases) == [
        None, "event_time too far in the past", "event_time too far in the past", None, None,
        "event_time too far in the past", "event_time in seconds", "event_time in microseconds",
        "event_time in nanoseconds", "event_time too far in the future", "event_time not integral",
        "produced_at too far in the past", None, "amount_cents out of range", "amount_cents out of range"]


def test_a_place_is_both_coordinates_or_neither(spark, settings):
    live = dict(event_time=NOW - 1_000)
    cases = [
        (txn(**live), None),                                   # no lat, no lon: scored without a place
        (txn(lat=None, lon=None, **live), None),               # both null: the same
        (txn(lat=48.85, lon=2.35, **live), None),
        (txn(lat=48.85, **live), None),                        # one without the other
        (txn(lon=2.35, **live), None),
        (txn(lat=48.85, lon=None, **live), None),
        (txn(lat=None, lon=2.35, **live), None),
        (txn(lat=91.0, lon=2.35, **live), None),
        (txn(), REPLAY),                                       # a replayed history without places
    ]
    assert verdicts(spark, settings, cases) == [
        None, None, None, "missing field lon", "missing field lat", "missing field lon", "missing field lat",
        "lat/lon out of range", None]
    ts = datetime.fromtimestamp(NOW / 1000, timezone.utc)
    frame = spark.createDataFrame([(txn(**live), 0, 0, ts, None)], KAFKA_DDL)
    row = parse_transactions(frame, settings).first()
    assert row.lat is None and row.lon is None and row.amount_cents == 5716


def test_a_frame_without_headers_is_judged_by_the_live_rules(spark, settings):
    ts = datetime.fromtimestamp(NOW / 1000, timezone.utc)
    frame = spark.createDataFrame([(txn(), 0, 0, ts), (txn(event_time=NOW), 0, 1, ts)],
                                  "value binary, partition int, offset long, timestamp timestamp")
    rows = sorted(parse_transactions(frame, settings).collect(), key=lambda r: r.offset)
    assert [r.dlq_reason for r in rows] == ["event_time too far in the past", None]


def test_the_real_time_path_scores_a_transaction_without_a_place_with_no_proximity_opinion(spark, tmp_path):
    """realtime.decisions over the Java live profiles: a row with null lat/lon gets proximity 0, a
    score and a verdict (no null leaks), and leaves the card's place as it was: the next placed
    transaction is compared with the last real place, as the Python analyzers do."""
    import time as _time
    import uuid

    from pyspark.sql import functions as F

    from infra.contracts import ANALYZERS
    from pipelines.fraud import seed
    from pipelines.fraud.analyzers import DEFAULT_LIMITS, score_transaction
    from pipelines.fraud.realtime import decisions

    t0, now = 1_700_000_000_000, int(_time.time() * 1000)
    places = [(48.8566, 2.3522), (None, None), (40.7128, -74.0060), (None, None), (40.75, -73.99)]
    rows = [(f"t{i}", "card-x", "m", 2_000 + 10 * i, lat, lon, t0 + i * 1_200_000, 0, i, now, now)
            for i, (lat, lon) in enumerate(places)]
    ddl = ("txn_id string, card_id string, merchant_id string, amount_cents long, lat double, lon double, "
           "event_time long, partition int, offset long, produced_at long, ts_ms long")
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 1), ddl)
    df = df.select("*", F.timestamp_millis("ts_ms").alias("kafka_ts"))
    scope = f"test-{uuid.uuid4().hex[:8]}"
    plan = seed.Plan(starts={0: 0}, folds={0: 0}, holes={})
    path = seed.write(tmp_path / f"{scope}.tsv",
                      seed.seed_lines(scope, seed.Snapshot(), plan, DEFAULT_LIMITS, 86_400_000, 1))
    out = {r["txn_id"]: r for r in decisions(df, str(path), None, 0.7, 60_000).collect()}
    profile, want = None, []
    for _, _, _, amount, lat, lon, t, *_ in rows:
        scores, profile = score_transaction(profile, {"amount_cents": amount, "lat": lat, "lon": lon, "event_time": t})
        want.append(scores)
    assert [want[i]["proximity"] for i in range(5)] == [0.0, 0.0, 1.0, 0.0, 0.0]  # t2: Paris -> New York in 40 min
    for i in range(5):
        got = out[f"t{i}"]
        assert [got[f"score_{n}"] for n in ANALYZERS] == [want[i][n] for n in ANALYZERS], i
        assert got["score"] is not None and got["is_fraud"] is not None
