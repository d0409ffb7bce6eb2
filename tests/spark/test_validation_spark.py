"""The validation contract's Spark SQL expressions (pipelines/engine/sources.py) on static frames
shaped like the Kafka source: every kind of the simulator's malformed corpus gets its reason, the
same one the Python mirror gives; valid transactions (edges included) pass with their values; no
invalid record reaches `timestamp_millis`; the dead-letter head is bounded in bytes; decisions get
the same contract and the rejected ones are counted, not dropped silently. Every test runs with
both parses of the records' JSON (JSON_PARSE: the JVM scan, and Spark's try_parse_json and variant
functions): the same verdict, reason for reason."""
from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import datetime, timezone

import numpy as np
import pytest
from pyspark.sql import functions as F

from infra.contracts import DEAD_LETTER_HEAD_BYTES, MAX_ID_BYTES, TRANSACTION_FIELDS, dead_letter_reason
from pipelines.engine.sources import DECISIONS_REJECTED, decision_reasons, parse_decisions, parse_transactions
from simulator import patterns as P

NOW = 1_750_000_000_000
KAFKA_DDL = "value binary, partition int, offset long, timestamp timestamp"


@pytest.fixture(params=["scan", "spark"])
def parsed(request, settings):
    """The suite's settings with each JSON parse in turn."""
    return replace(settings, json_parse=request.param)


def kafka_frame(spark, values):
    ts = datetime.fromtimestamp(NOW / 1000, timezone.utc)
    return spark.createDataFrame([(v, 0, i, ts) for i, v in enumerate(values)], KAFKA_DDL)


def fields(t=NOW - 1_000, **changes):
    return {"txn_id": "t-000123", "card_id": "c-9", "merchant_id": "m-1", "amount_cents": 2_500, "currency": "EUR",
            "lat": 48.85661, "lon": 2.35222, "event_time": t, "produced_at": t, **changes}


def test_every_malformed_kind_gets_its_reason_in_spark_as_in_python(spark, parsed):
    rng = np.random.default_rng(5)
    cases = []
    for kind in P.BAD_KINDS:
        for _ in range(6 if kind in P.RANDOM_KINDS else 1):
            cases.append((kind, P.malformed(fields(), kind, rng)[0]))
    rows = parse_transactions(kafka_frame(spark, [p for _, p in cases]), parsed, now_ms=NOW).collect()
    assert len(rows) == len(cases)
    wrong = []
    for (kind, payload), row in zip(cases, sorted(rows, key=lambda r: r.offset)):
        mirror = dead_letter_reason(payload, NOW)
        expected_ok = (P.BAD_REASONS[kind] in (row.dlq_reason or "")) if kind in P.RANDOM_KINDS \
            else row.dlq_reason == P.BAD_REASONS[kind]
        if not expected_ok or row.dlq_reason != mirror:
            wrong.append((kind, row.dlq_reason, mirror))
        assert row.raw["size"] == len(payload) and row.raw["head"] == payload[:DEAD_LETTER_HEAD_BYTES]
    assert not wrong, wrong


def test_valid_transactions_pass_with_their_values_and_reach_timestamp_millis(spark, parsed):
    ok = [fields(), fields(amount_cents=1, lat=-90, lon=180), fields(amount_cents=P.MAX_AMOUNT_CENTS),
          fields(txn_id="x" * MAX_ID_BYTES, card_id="\u20ac" * (MAX_ID_BYTES // 3)),
          fields(merchant_id=None, currency=None), fields(t=NOW - 7 * P.DAY_MS), fields(t=NOW + 300_000),
          {**fields(), "note": {"nested": ["objects", "are", "allowed", "beside", "the", "contract"]}}]
    payloads = [json.dumps(d, ensure_ascii=False).encode() for d in ok]
    payloads.append(P._json(fields()).replace(b":2500,", b":2.5e3,"))  # an integral number written otherwise
    bad = [P.malformed(fields(), kind, np.random.default_rng(1))[0] for kind in P.BAD_KINDS]
    parsed = parse_transactions(kafka_frame(spark, payloads + bad), parsed, now_ms=NOW)
    rows = sorted(parsed.collect(), key=lambda r: r.offset)
    assert [r.dlq_reason for r in rows[:len(payloads)]] == [None] * len(payloads)
    assert all(r.dlq_reason is not None for r in rows[len(payloads):])
    for doc, row in zip(ok, rows):
        for name in TRANSACTION_FIELDS:
            assert getattr(row, name) == doc.get(name), (name, doc, row)
    assert rows[len(ok)].amount_cents == 2500
    # the fraud job's path: only valid records reach timestamp_millis (nanoseconds would overflow it)
    valid = parsed.where(F.col("dlq_reason").isNull()).withColumn("event_ts", F.timestamp_millis("event_time"))
    assert valid.count() == len(payloads)


def test_utf8_and_blank_ids_get_the_same_verdict_in_spark_as_in_python(spark, parsed):
    """The UTF-8 check sits in the JSON scan (is_valid_utf8 only for what it refuses): every kind of
    bad sequence, in a field asked for, in one that is not, and inside a nested value, is named as
    Python names it; valid multi-byte text passes. A blank id (spaces only) is empty."""
    bad = [b"\xff", b"\x80", b"\xc0\x80", b"\xc1\xbf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82",
           b"\xf0\x9f\x98", b"\xf8\x88\x80\x80\x80", b"a\xe9b"]
    good = ["\u00e9", "\u20ac", "\U0001f600", "\u07ff\u0800\uffff\U00010000\U0010ffff"]
    payloads = []
    for where in ("txn_id", "merchant_id"):
        payloads += [json.dumps(fields(**{where: "t-@@"})).encode().replace(b"@@", b) for b in bad]
        payloads += [json.dumps(fields(**{where: "t-" + g}), ensure_ascii=False).encode() for g in good]
    payloads += [json.dumps({**fields(), "note": {"x": ["@@"]}}).encode().replace(b"@@", b) for b in bad[:3]]
    payloads += [json.dumps(fields(txn_id=i)).encode() for i in ("   ", " t-1", "t-1 ", "", " ")]
    rows = sorted(parse_transactions(kafka_frame(spark, payloads), parsed, now_ms=NOW).collect(),
                  key=lambda r: r.offset)
    got = [r.dlq_reason for r in rows]
    assert got == [dead_letter_reason(p, NOW) for p in payloads]
    assert got.count("invalid UTF-8") == 2 * len(bad) + 3
    assert got[-5:] == ["empty txn_id", None, None, "empty txn_id", "empty txn_id"]
    assert rows[len(bad)].txn_id == "t-" + good[0]


def test_a_currency_gets_the_same_verdict_in_spark_as_in_python(spark, parsed):
    # deferred: the store (sqlite-utils, pandas) loads only where used
    from tests.unit.test_validation import CURRENCIES

    payloads = [json.dumps(fields(currency=c), ensure_ascii=False).encode() for c, _ in CURRENCIES]
    rows = sorted(parse_transactions(kafka_frame(spark, payloads), parsed, now_ms=NOW).collect(),
                  key=lambda r: r.offset)
    assert [(c, r.dlq_reason) for (c, _), r in zip(CURRENCIES, rows)] == [(c, why) for c, why in CURRENCIES]
    assert [r.currency for r in rows[:3]] == ["EUR", "USD", "JPY"]


def test_the_window_follows_the_settings_and_the_processing_time(spark, parsed):
    payload = P._json(fields(t=NOW - 3_600_000))
    narrow = replace(parsed, validation_past_seconds=60, validation_future_seconds=1)
    assert parse_transactions(kafka_frame(spark, [payload]), parsed, now_ms=NOW).first().dlq_reason is None
    assert parse_transactions(kafka_frame(spark, [payload]), narrow, now_ms=NOW).first().dlq_reason == \
        "event_time too far in the past"
    # by default `now` is each record's Kafka append time (NOW in kafka_frame), not the clock of
    # the batch that reads it: a record appended at NOW is judged at NOW, however late it is read
    wall = int(time.time() * 1000)
    rows = parse_transactions(kafka_frame(spark, [P._json(fields(t=NOW - 1_000)), P._json(fields(t=wall))]),
                              parsed).orderBy("offset").collect()
    assert rows[0].dlq_reason is None
    assert rows[1].dlq_reason == "event_time too far in the future"


DECISION = {"txn_id": "t-1", "card_id": "c-1", "merchant_id": "m-1", "amount_cents": 100, "event_time": NOW - 1000,
            "produced_at": NOW - 900, "decided_at": NOW - 800, "score": 0.1, "is_fraud": False, "is_late": False}


def test_decisions_get_the_same_contract(spark, parsed):
    cases = [
        (DECISION, None),
        ({**DECISION, "event_time": 1_700_000_000_000}, None),  # old decisions are counted (replays, backlogs)
        ({k: v for k, v in DECISION.items() if k != "txn_id"}, "missing field txn_id"),
        ({**DECISION, "txn_id": 17}, "wrong type for txn_id"),
        ({**DECISION, "card_id": ""}, "empty card_id"),
        ({**DECISION, "card_id": "c" * (MAX_ID_BYTES + 1)}, "card_id too long"),
        ({**DECISION, "is_fraud": "yes"}, "wrong type for is_fraud"),
        ({**DECISION, "event_time": (NOW - 1000) * 1_000_000}, "event_time in nanoseconds"),
        ({**DECISION, "event_time": (NOW - 1000) // 1000}, "event_time in seconds"),
        ({**DECISION, "event_time": NOW + 86_400_000}, "event_time too far in the future"),
        ({**DECISION, "event_time": "soon"}, "wrong type for event_time"),
    ]
    payloads = [json.dumps(d).encode() for d, _ in cases] + [b"\xff{}", b"[]", b""]
    expected = [r for _, r in cases] + ["invalid UTF-8", "not a JSON object", "empty payload"]
    rows = sorted(decision_reasons(kafka_frame(spark, payloads), parsed, now_ms=NOW).collect(),
                  key=lambda r: r.offset)
    assert [r.reason for r in rows] == expected
    assert rows[0].txn_id == "t-1" and rows[0].event_time == NOW - 1000 and rows[0].is_fraud is False


def test_rejected_decisions_are_not_counted_and_are_reported_per_batch(spark, parsed, tmp_path):
    """parse_decisions in a real streaming query: the rejected ones are left out of the batch and
    counted in the query progress's observed metric."""
    good = [json.dumps({**DECISION, "txn_id": f"t-{i}", "event_time": int(time.time() * 1000)}).encode()
            for i in range(5)]
    bad = [json.dumps({**DECISION, "txn_id": ""}).encode(), b"{oops",
           json.dumps({**DECISION, "event_time": int(time.time() * 1000) * 1000}).encode()]
    values = good + bad
    # a streaming source shaped like Kafka's: the rate-micro-batch source, one row per payload
    # (its timestamp, the records' "append time" and so the parser's now, starts at the wall clock)
    stream = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", len(values))
              .option("startTimestamp", int(time.time() * 1000)).load()
              .where(F.col("value") < len(values))
              .select(F.element_at(F.array(*[F.lit(v) for v in values]), (F.col("value") + 1).cast("int")).alias("value"),
                      F.lit(0).alias("partition"), F.col("value").alias("offset"), F.col("timestamp")))
    seen = []
    query = (parse_decisions(stream, s=parsed).writeStream
             .foreachBatch(lambda df, _: seen.extend(r.txn_id for r in df.collect()))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(once=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(seen) == [f"t-{i}" for i in range(5)]
    progress = [p for p in query.recentProgress if p.numInputRows]
    metrics = progress[-1].observedMetrics[DECISIONS_REJECTED]
    assert metrics["rejected"] == 3
    assert sorted(metrics["reasons"]) == ["empty txn_id", "event_time in microseconds", "malformed JSON"]
