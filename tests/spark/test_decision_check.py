"""The decision contract's verdict in the JVM (cardstream.parse.DecisionCheck, what the usage job's
guarantee queries count with) against the contract's Spark SQL expressions (`decision_reasons`,
which name the reasons): the same verdict for every record — valid ones on and off the scan's path,
each kind of broken one, every bound on both sides, random byte mutations — and a batch's count
(`tally`) equal to what the expressions give."""
from __future__ import annotations

import json
import random
from dataclasses import replace

import numpy as np
import pytest
from pyspark.sql import functions as F

from infra.contracts import DECISION_MIN_EVENT_TIME_MS, MAX_ID_BYTES, MAX_PAYLOAD_BYTES
from pipelines.engine.sources import decision_check, decision_reasons
from pipelines.usage.job import tally
from simulator import patterns as P
from tests.spark.test_validation_spark import DECISION, NOW, kafka_frame


def corpus(settings) -> list[bytes]:
    future = NOW + settings.validation_future_seconds * 1000

    def d(**changes):
        return json.dumps({**DECISION, **changes}, ensure_ascii=False).encode()

    out = [d(), d(is_fraud=True), json.dumps(DECISION, indent=2).encode(), d(note={"a": [1, {"b": None}]}),
           json.dumps(dict(reversed(list(DECISION.items())))).encode(),
           d(merchant_id="m-\\u00e9").replace(b"\\\\", b"\\"),  # an escape beside the fields: the builder's path
           d().replace(b'"event_time": %d' % DECISION["event_time"], b'"event_time": %.4e' % DECISION["event_time"])]
    for name in ("txn_id", "card_id"):
        out += [d(**{name: v}) for v in ("", " ", "   ", " x", "x ", "\t", "x" * MAX_ID_BYTES, "x" * (MAX_ID_BYTES + 1),
                                         "\u20ac" * (MAX_ID_BYTES // 3), "\u20ac" * (MAX_ID_BYTES // 3 + 1), 7, None,
                                         True, ["x"])]
    for name in ("txn_id", "card_id", "event_time", "is_fraud"):
        out += [json.dumps({k: v for k, v in DECISION.items() if k != name}).encode(), d(**{name: None}),
                d(**{name: {"x": 1}}), d(**{name: "1"})]
    out += [d(is_fraud=v) for v in (0, 1, "true", "false")]
    for t in (DECISION_MIN_EVENT_TIME_MS - 1, DECISION_MIN_EVENT_TIME_MS, future, future + 1, NOW // 1000,
              NOW * 1000, NOW * 1_000_000, -NOW, 0, 2 ** 63 - 1, 2 ** 63, 10 ** 30, NOW + 0.5, float(NOW)):
        out.append(d(event_time=t))
    out += [d().replace(b'"event_time": %d' % DECISION["event_time"], v) for v in
            (b'"event_time": 1e400', b'"event_time": -1e400', b'"event_time": 1.7500000000000e12',
             b'"event_time": 17499999990000e-1', b'"event_time": 1749999999000.000')]
    out += [b"", b" ", b"{}", b"[]", b"null", b"1", b'"x"', d() + b" x", d()[:-1], d() + b"\n",
            b"\xff" + d(), d(txn_id="t-\u00e9").replace("\u00e9".encode(), b"\xc3"),
            d().replace(b'"card_id"', b'"txn_id"'),  # a repeated name
            d(pad="x" * (MAX_PAYLOAD_BYTES - len(d()) - 11)), d(pad="x" * (MAX_PAYLOAD_BYTES - len(d()) - 10))]
    rng = np.random.default_rng(3)
    for kind in P.BAD_KINDS:
        try:
            out.append(P.malformed(dict(DECISION), kind, rng)[0])
        except (KeyError, TypeError, ValueError):
            pass  # a kind built for a transaction's fields only
    r = random.Random(11)
    for _ in range(400):  # a byte changed, dropped or added anywhere
        b = bytearray(d(is_fraud=r.random() < 0.5))
        i = r.randrange(len(b))
        op = r.random()
        if op < 0.4:
            b[i] = r.choice(b' {}[]",:.-+eE0123456789tfnul\\\x00\xff\xc3x')
        elif op < 0.7:
            del b[i]
        else:
            b.insert(i, r.choice(b' {}",:0-.e\\x\xe9'))
        out.append(bytes(b))
    return out


@pytest.fixture(scope="module")
def judged(spark, settings):
    """(payloads, the expressions' reasons, the JVM's verdicts), record by record."""
    payloads = corpus(settings)
    rows = sorted(decision_reasons(kafka_frame(spark, payloads), settings).collect(), key=lambda r: r.offset)
    check = decision_check(spark, settings)
    verdicts = [bool(check.valid(bytearray(p), NOW * 1000)) for p in payloads]
    return payloads, [r.reason for r in rows], verdicts


def test_the_jvm_verdict_is_the_expressions_verdict_for_every_record(judged):
    payloads, reasons, verdicts = judged
    wrong = [(p[:120], why) for p, why, ok in zip(payloads, reasons, verdicts) if ok != (why is None)]
    assert not wrong, wrong
    # the corpus reaches both sides, and most of the contract's reasons
    assert 20 < verdicts.count(True) < len(verdicts) - 100
    named = {why.split(" for ")[0] if why.startswith("wrong type") else why for why in reasons if why}
    assert {"empty payload", "oversized payload", "invalid UTF-8", "duplicate field", "malformed JSON",
            "not a JSON object", "missing field txn_id", "wrong type", "empty txn_id", "card_id too long",
            "event_time not integral", "event_time in seconds", "event_time in nanoseconds",
            "event_time too far in the past", "event_time too far in the future"} <= named


def test_a_batch_counts_as_the_expressions_count_it(spark, settings, judged):
    payloads, reasons, _ = judged
    frame = kafka_frame(spark, payloads).withColumn("key", F.lit(None).cast("binary"))
    # the first JSON value of the text, as try_parse_json reads it (text after it is let be)
    fraud = sum(1 for p, why in zip(payloads, reasons)
                if why is None and json.JSONDecoder().raw_decode(p.decode())[0]["is_fraud"])
    valid = reasons.count(None)
    assert tally(frame.repartition(3), decision_check(spark, settings)) == (valid, fraud, len(payloads) - valid)


def test_the_bounds_follow_the_settings_and_each_records_kafka_time(spark, settings):
    late = json.dumps({**DECISION, "event_time": NOW + 2_000}).encode()
    narrow = decision_check(spark, replace(settings, validation_future_seconds=1))
    assert decision_check(spark, settings).valid(bytearray(late), NOW * 1000)
    assert not narrow.valid(bytearray(late), NOW * 1000)
    assert narrow.valid(bytearray(late), (NOW + 1_000) * 1000)
    # a record without a Kafka time has no time in its bounds, as the expressions judge it
    frame = kafka_frame(spark, [late]).withColumn("timestamp", F.lit(None).cast("timestamp"))
    assert decision_reasons(frame, settings).first().reason is not None
    assert tally(frame.withColumn("key", F.lit(None).cast("binary")), decision_check(spark, settings)) == (0, 0, 1)
