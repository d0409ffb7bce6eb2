"""The validation contract's pure parts: the time rule, the simulator's malformed corpus and its
Python mirror of the contract, the dead-letter record (bounded, and it cannot fail), and the
settings. The same corpus goes through Spark in tests/spark/test_validation_spark.py and through
the real fraud job in tests/e2e/test_bad_input_corpus.py."""
from __future__ import annotations

import base64
import collections
import json

import numpy as np
import pytest

from infra.config import load
from infra.contracts import DEAD_LETTER_HEAD_BYTES, MAX_ID_BYTES, MAX_PAYLOAD_BYTES, dead_letter_reason, time_reason
from pipelines.fraud.sinks import DLQ_RAW_LIMIT, dead_letter
from simulator import patterns as P
from simulator.stream import Stream

NOW = 1_750_000_000_000
LOW, HIGH = NOW - 7 * P.DAY_MS, NOW + 300_000


def fields(t=NOW - 1_000, **changes):
    return {"txn_id": "t-000123", "card_id": "c-9", "merchant_id": "m-1", "amount_cents": 2_500, "currency": "EUR",
            "lat": 48.85661, "lon": 2.35222, "event_time": t, "produced_at": t, **changes}


# ------------------------------------------------------------------ the time rule

@pytest.mark.parametrize("value,reason", [
    (NOW, None), (LOW, None), (HIGH, None), (NOW - 6 * P.DAY_MS, None),
    (NOW // 1000, "event_time in seconds"), (LOW // 1000, "event_time in seconds"),
    (NOW * 1000, "event_time in microseconds"), (NOW * 1_000_000, "event_time in nanoseconds"),
    (LOW - 1, "event_time too far in the past"), (HIGH + 1, "event_time too far in the future"),
    (0, "event_time too far in the past"), (-1, "event_time too far in the past"),
    (-(2 ** 63), "event_time too far in the past"), (2 ** 63 - 1, "event_time too far in the future"),
    (253_402_300_799_999, "event_time too far in the future"),  # year 9999 in ms
    (NOW * 10, "event_time too far in the future"),
])
def test_a_time_is_milliseconds_inside_the_window_or_gets_its_unit_or_its_direction(value, reason):
    assert time_reason("event_time", value, LOW, HIGH) == reason


# ------------------------------------------------------------------ the corpus and the mirror

def test_the_corpus_has_at_least_30_kinds_each_with_its_reason():
    assert len(P.BAD_KINDS) >= 30 and len(set(P.BAD_KINDS)) == len(P.BAD_KINDS)
    assert set(P.BAD_REASONS) == set(P.BAD_KINDS)
    assert len(P.BAD_KINDS) <= 50  # one press of the bad-input fault (50 by default) shows every kind


@pytest.mark.parametrize("kind", P.BAD_KINDS)
def test_every_kind_breaks_the_contract_with_its_reason(kind):
    rng = np.random.default_rng(7)
    for _ in range(20 if kind in P.RANDOM_KINDS else 1):
        payload, has_id = P.malformed(fields(), kind, rng)
        reason = dead_letter_reason(payload, NOW)
        if kind in P.RANDOM_KINDS:
            assert reason is not None and P.BAD_REASONS[kind] in reason, (kind, reason)
        else:
            assert reason == P.BAD_REASONS[kind], (kind, reason, payload[:200])
        assert has_id == P.has_txn_id(payload, "t-000123")


def test_valid_transactions_pass_including_the_edges_of_every_rule():
    ok = [fields(), fields(amount_cents=1), fields(amount_cents=P.MAX_AMOUNT_CENTS), fields(lat=-90.0, lon=180.0),
          fields(txn_id="x" * MAX_ID_BYTES), fields(card_id="\u20ac" * (MAX_ID_BYTES // 3)),
          fields(merchant_id=None), fields(currency=None), fields(t=LOW), fields(t=HIGH),
          {k: v for k, v in fields().items() if k not in ("merchant_id", "currency")},
          {**fields(), "note": "extra fields are allowed"}]
    for doc in ok:
        payload = json.dumps(doc, ensure_ascii=False).encode()
        assert dead_letter_reason(payload, NOW) is None, doc
    assert dead_letter_reason(b"  " + P._json(fields()) + b"\n", NOW) is None
    assert dead_letter_reason(P._json(fields(amount_cents=2500.0)), NOW) is None  # integral
    assert dead_letter_reason(P._json(fields()).replace(b":2500,", b":2.5e3,"), NOW) is None


# a currency is ISO 4217's form or absent: (value, reason); the Spark test uses the same cases
CURRENCIES = [
    ("EUR", None), ("USD", None), ("JPY", None), (None, None),
    ("\u20ac" * 8, "currency not ISO 4217"), ("eur", "currency not ISO 4217"), ("EURO", "currency not ISO 4217"),
    ("EU", "currency not ISO 4217"), ("", "currency not ISO 4217"), ("E1R", "currency not ISO 4217"),
    ("EUR\n", "currency not ISO 4217"), (" EUR", "currency not ISO 4217"),
    ("\uff25\uff35\uff32", "currency not ISO 4217"),  # fullwidth capitals: letters, but not ASCII
    ("\u00c9UR", "currency not ISO 4217"), (978, "wrong type for currency"),
    ("E" * (MAX_ID_BYTES + 1), "currency too long"),
]


@pytest.mark.parametrize("currency,reason", CURRENCIES)
def test_a_currency_is_three_capital_ascii_letters_or_absent(currency, reason):
    payload = json.dumps(fields(currency=currency), ensure_ascii=False).encode()
    assert dead_letter_reason(payload, NOW) == reason
    absent = {k: v for k, v in fields().items() if k != "currency"}
    assert dead_letter_reason(json.dumps(absent).encode(), NOW) is None


def test_size_is_counted_in_bytes_and_utf8_on_the_bytes():
    doc = fields()
    under = json.dumps({**doc, "note": "\u20ac" * 6000}, ensure_ascii=False).encode()
    assert len(under.decode()) < MAX_PAYLOAD_BYTES < len(under)
    assert dead_letter_reason(under, NOW) == "oversized payload"
    assert dead_letter_reason(b"x" * (MAX_PAYLOAD_BYTES + 1), NOW) == "oversized payload"
    assert dead_letter_reason(P._json(doc).replace(b"m-1", b"m-\xe9"), NOW) == "invalid UTF-8"
    assert dead_letter_reason(b"", NOW) == "empty payload" and dead_letter_reason(None, NOW) == "empty payload"


def test_without_a_processing_time_the_window_is_not_checked():
    assert dead_letter_reason(P._json(fields(t=1_700_000_000_000))) is None
    assert dead_letter_reason(P._json(fields(t=1_700_000_000_000)), NOW) == "event_time too far in the past"


def test_labels_carry_a_payload_without_a_readable_id_as_text_or_base64():
    label = json.loads(P.label("t-1", "bad:invalid-utf8", raw=b'{"a":"\xff"}'))
    assert label["raw_encoding"] == "base64" and base64.b64decode(label["raw"]) == b'{"a":"\xff"}'
    label = json.loads(P.label("t-1", "bad:bad-json", raw=b"{not json"))
    assert label["raw"] == "{not json" and "raw_encoding" not in label


def test_the_bad_input_fault_sends_every_kind_in_turn():
    stream = Stream(3, 100, start_ms=NOW, fraud_rate=0.0, late_rate=0.0)
    stream.force_bad(len(P.BAD_KINDS) + 3)
    events = stream.take(len(P.BAD_KINDS) + 3)
    kinds = [e.pattern[4:] for e in events]
    assert kinds == list(P.BAD_KINDS) + list(P.BAD_KINDS[:3])
    for e in events:
        kind = e.pattern[4:]
        reason = dead_letter_reason(e.payload, now_ms=e.event_time)
        assert reason is not None and P.BAD_REASONS[kind] in reason, (kind, reason)
        label = json.loads(e.label)
        assert ("raw" in label) == (not P.has_txn_id(e.payload, e.txn_id))
        if "raw" in label:
            raw = base64.b64decode(label["raw"]) if label.get("raw_encoding") == "base64" else label["raw"].encode()
            assert raw == e.payload


def test_a_random_bad_rate_draws_every_kind_and_each_is_caught():
    events = list(Stream(11, None, count=6000, start_ms=NOW, fraud_rate=0.0, bad_rate=0.3))
    seen = collections.Counter()
    for e in events:
        if e.pattern.startswith("bad:"):
            kind = e.pattern[4:]
            seen[kind] += 1
            reason = dead_letter_reason(e.payload, now_ms=e.event_time)
            assert reason is not None and P.BAD_REASONS[kind] in reason, (kind, reason)
        else:
            assert dead_letter_reason(e.value(e.event_time), now_ms=e.event_time) is None
    assert set(seen) == set(P.BAD_KINDS)


# ------------------------------------------------------------------ the dead-letter record

def letter(value: bytes | None, reason="malformed JSON", head_only=True):
    raw = None if value is None else {"head": value[:DEAD_LETTER_HEAD_BYTES], "size": len(value)}
    return dead_letter({"raw": raw if head_only else value, "dlq_reason": reason, "partition": 1, "offset": 42},
                       "tx", 7)


def test_a_dead_letter_says_why_where_and_how_big():
    d = letter(b"{not json")
    assert d == {"reason": "malformed JSON", "raw": "{not json", "raw_encoding": "utf-8", "raw_bytes": 9,
                 "raw_truncated": False, "partition": 1, "offset": 42, "topic": "tx", "ts": 7}


def test_a_dead_letter_of_invalid_utf8_is_base64_of_the_bytes_not_replacement_characters():
    value = b'{"txn_id":"\xff\xfe"}'
    d = letter(value, "invalid UTF-8")
    assert d["raw_encoding"] == "base64" and base64.b64decode(d["raw"]) == value and d["raw_bytes"] == len(value)


def test_a_dead_letter_stays_small_whatever_the_payload():
    worst = [b"\xff" * 200_000, b"x" * 900_000, b"\x01" * 1_000_000, "\u20ac".encode() * 300_000,
             b'"' * 500_000, b"\\" * 500_000]
    for value in worst:
        d = letter(value, "oversized payload")
        encoded = json.dumps(d).encode()
        assert d["raw_bytes"] == len(value) and d["raw_truncated"]
        assert len(encoded) < 7 * DLQ_RAW_LIMIT < 1_000_000, len(encoded)
        # the whole payload, not just the head handed over, gives the same record
        assert letter(value, "oversized payload", head_only=False) == d


def test_a_character_cut_by_the_truncation_does_not_turn_the_head_to_base64():
    value = b"a" + "\u20ac".encode() * 10_000  # the cut at DLQ_RAW_LIMIT falls inside a character
    d = letter(value, "oversized payload")
    assert d["raw_encoding"] == "utf-8" and d["raw"] == "a" + "\u20ac" * ((DLQ_RAW_LIMIT - 1) // 3)


@pytest.mark.parametrize("row", [
    {"raw": None, "dlq_reason": "empty payload", "partition": 0, "offset": 1},
    {"raw": {"head": None, "size": None}, "dlq_reason": None, "partition": None, "offset": None},
    {"raw": "legacy text \ud800", "dlq_reason": "malformed JSON", "partition": 0, "offset": 1},
    {"raw": bytearray(b"\x00\xff"), "dlq_reason": "invalid UTF-8"},
    {},
])
def test_a_dead_letter_cannot_fail(row):
    d = dead_letter(row, "tx", 1)
    json.dumps(d)
    assert d["reason"] and d["raw_bytes"] >= 0


# ------------------------------------------------------------------ settings

def test_validation_window_and_batch_bound_are_settings_with_defaults():
    s = load({})
    assert (s.validation_past_seconds, s.validation_future_seconds) == (7 * 24 * 3600, 300)
    assert s.max_offsets_per_trigger == 20_000
    s = load({"VALIDATION_PAST_SECONDS": "60", "VALIDATION_FUTURE_SECONDS": "5", "MAX_OFFSETS_PER_TRIGGER": "10"})
    assert (s.validation_past_seconds, s.validation_future_seconds, s.max_offsets_per_trigger) == (60, 5, 10)


def test_the_spark_readers_poll_size_is_a_positive_setting():
    assert load({}).spark_max_poll_records == 5000
    assert load({"SPARK_KAFKA_MAX_POLL_RECORDS": "500"}).spark_max_poll_records == 500
    for bad, says in (("0", "at least 1"), ("-5", "at least 1"), ("many", "whole number")):
        with pytest.raises(SystemExit, match=says):
            load({"SPARK_KAFKA_MAX_POLL_RECORDS": bad})
