"""The messages the parts exchange, as plain Python: field names, types and sane ranges.

The simulator produces these, the Spark jobs parse them (pipelines/engine/sources.py builds its
Spark schema and its validation from here), the audit and the dashboard read them. One definition, no copies.
"""
from __future__ import annotations

import json
import math
import re

from infra.histories import HISTORY_MIN_EVENT_TIME_MS

# Transaction (topic `transactions`, key = card_id, value = JSON)
TRANSACTION_FIELDS: dict[str, type] = {
    "txn_id": str,
    "card_id": str,
    "merchant_id": str,
    "amount_cents": int,
    "currency": str,
    "lat": float,
    "lon": float,
    "event_time": int,   # ms since epoch; may be late or out of order
    "produced_at": int,  # ms since epoch, when the simulator sent it
}
REQUIRED_TRANSACTION_FIELDS = ("txn_id", "card_id", "amount_cents", "lat", "lon", "event_time", "produced_at")
# ... but a place is both coordinates or neither: lat and lon both absent (or null) is a transaction
# scored without a place (the proximity analyzer has no opinion); one without the other is missing
PLACE_FIELDS = ("lat", "lon")

# Limits past which a transaction is malformed rather than merely unusual.
MAX_AMOUNT_CENTS = 100_000_000  # one million in the card's currency
MAX_PAYLOAD_BYTES = 16_384      # counted in bytes of the Kafka value, not characters
MAX_ID_BYTES = 128              # txn_id, card_id, merchant_id (and currency), UTF-8 bytes
ID_FIELDS = ("txn_id", "card_id", "merchant_id")
CURRENCY_FORM = "[A-Z]{3}"      # ISO 4217's alphabetic code, the whole value (see the rules below)
TIME_FIELDS = ("event_time", "produced_at")
MAX_JSON_DEPTH = 1000           # deeper nesting is malformed JSON (the JVM's JSON parser refuses it)
# A decision's event time was checked against the fraud job's clock when it was decided; the usage
# job reads decisions long after (replays, backlogs), so it checks only that the time is
# plausible milliseconds: not before 2000-01-01, not ahead of its own clock by more than the
# validation window's future part.
DECISION_MIN_EVENT_TIME_MS = 946_684_800_000
# A dead letter carries at most this many bytes of the payload (base64 when not valid UTF-8):
# enough to see what went wrong, and a batch of dead letters collected on the driver stays bounded
# (MAX_OFFSETS_PER_TRIGGER x 4 KiB: 80 MB at the defaults, whatever the payloads' sizes).
DEAD_LETTER_HEAD_BYTES = 4_096

# The validation contract (pipelines/engine/sources.py applies it in Spark SQL; `dead_letter_reason`
# below mirrors it in Python). The first rule a record breaks is its reason; rules are checked in
# this order:
#   empty payload          value null or zero bytes
#   oversized payload      more than MAX_PAYLOAD_BYTES bytes
#   invalid UTF-8          the raw bytes are not UTF-8 (checked on the bytes, before any decoding)
#   duplicate field        a top-level JSON name appears twice
#   malformed JSON         not JSON (incl. NaN/Infinity tokens, a lone surrogate escape, nesting
#                          deeper than MAX_JSON_DEPTH, a byte-order mark, raw control characters)
#   not a JSON object      JSON, but an array, string, number, true/false or null
#   missing field F        a required field absent or null; lat and lon are required together:
#                          both absent (or null) is valid, a transaction without a place (a
#                          replayed history may have none), one without the other is
#                          "missing field lat" / "missing field lon"
#   wrong type for F       a string field that is not a JSON string; a number field that is not a
#                          JSON number (a number in a string, "NaN", an object, an array, a boolean)
#   empty F                an id that is empty or only spaces
#   F too long             an id (or currency) longer than MAX_ID_BYTES bytes
#   currency not ISO 4217  a currency that is not ISO 4217's form, three capital ASCII letters
#                          ("EUR"; not "eur", "EURO", "€" or "EUR\n"). The currency stays optional:
#                          absent or null passes (amounts are compared per card, in its own currency)
#   amount_cents not integral / amount_cents out of range (1..MAX_AMOUNT_CENTS; a replay's
#                          0..MAX_AMOUNT_CENTS: a history's zero-amount payments, card checks,
#                          are payments: the handbook's dataset has 42)
#   lat/lon not finite / lat/lon out of range (|lat| <= 90, |lon| <= 180)
#   T not integral         a time with a fraction
#   T in seconds / T in microseconds / T in nanoseconds
#                          not inside the window in milliseconds, but inside it in that unit
#   T too far in the past / T too far in the future
#                          outside the window [now - VALIDATION_PAST_SECONDS,
#                          now + VALIDATION_FUTURE_SECONDS] (now: the batch's processing time)
#
# A replay (`python -m simulator replay`: a history sent again, years old by design) is told apart
# by a Kafka header: every record it sends carries infra.histories.REPLAY_HEADER
# ("cardstream-replay", value: the run id). Only the header counts (not the topic, not the
# payload): the jobs read it with the record (Spark's `includeHeaders`), and live traffic never
# sets it. For a record with the header the live rules hold except two: event_time must be
# integral milliseconds in [HISTORY_MIN_EVENT_TIME_MS (2000-01-01), now +
# VALIDATION_FUTURE_SECONDS] (the same seconds / microseconds / nanoseconds checks, against that
# range; before it "too far in the past"), and amount_cents may be 0. produced_at keeps the live
# window: the replay stamps it with the wall clock when it sends.


def time_reason(name: str, value: int, low_ms: int, high_ms: int) -> str | None:
    """Why an integral time `value` is not milliseconds in [low_ms, high_ms] (None: it is).

    The same arithmetic as the Spark expression in pipelines/engine/sources.py: no operation on
    the value itself (it may be any size), only comparisons with scaled bounds.
    """
    if low_ms <= value <= high_ms:
        return None
    if low_ms // 1_000 <= value <= high_ms // 1_000:
        return f"{name} in seconds"
    if low_ms * 1_000 <= value <= high_ms * 1_000:
        return f"{name} in microseconds"
    if low_ms * 1_000_000 <= value <= high_ms * 1_000_000:
        return f"{name} in nanoseconds"
    return f"{name} too far in the past" if value < low_ms else f"{name} too far in the future"

# Label (topic `labels`, key = txn_id): ground truth, never in the payload the detector reads.
# pattern: "normal", "spend-spike", "impossible-travel", "card-testing", or "bad:<kind>" for a malformed
# message. is_late: the event reached Kafka one to two lags after it happened (lateness is orthogonal to
# the pattern). A malformed message whose payload has no readable txn_id also carries `raw`, the
# exact payload sent, so it can be matched with its dead letter (base64, with
# "raw_encoding": "base64", when the payload is not valid UTF-8).
LABEL_FIELDS: dict[str, type] = {"txn_id": str, "is_fraud": bool, "pattern": str, "is_late": bool}
# Optional label fields (a replayed history's labels carry them all; a live label may lack them):
# what the job needs to use a label as delayed feedback without looking its transaction up.
# A replay's pattern is the history's (the handbook's scenario: HANDBOOK_PATTERNS of
# infra/histories.py), or "fraud" / "normal" when the history has none; its is_late is false.
LABEL_OPTIONAL_FIELDS: dict[str, type] = {
    "card_id": str,      # the transaction's card
    "merchant_id": str,  # the transaction's merchant (the handbook's terminal)
    "event_time": int,   # the transaction's event time, ms
    "known_at": int,     # ms, event time: when the label became known (event_time + the feedback delay);
                         # a replay sends a label only once its transactions have reached this time
}

ANALYZERS = ("avg_ticket", "proximity", "velocity")

# Decision (topic `decisions` and store table `decisions`); a record's Kafka key is its txn_id, so
# every copy of a decision sits in one partition (exactly-once's dedupe counts on it:
# pipelines/usage/dedupe.py; a record keyed otherwise is counted and logged as unkeyed)
DECISION_FIELDS: dict[str, type] = {
    "txn_id": str, "card_id": str, "merchant_id": str, "amount_cents": int, "event_time": int,
    "produced_at": int, "decided_at": int,
    **{f"score_{name}": float for name in ANALYZERS},
    "score": float, "is_fraud": bool, "is_late": bool,
    "model_version": int,  # the score aggregator that decided: 0 the rules, N a learned model (models table)
    # why: the three largest contributions to the score, as JSON [{"feature", "value", "share"}]
    # (pipelines/fraud/models.py says how each aggregator's are computed)
    "explanation": str,
}

GUARANTEES = ("at-most-once", "at-least-once", "exactly-once")
# The real-time fraud path's guarantees (Spark's Kafka sink cannot be transactional there, so no
# exactly-once): at-most-once restarts from the latest offsets, at-least-once from its checkpoint.
RT_GUARANTEES = ("at-most-once", "at-least-once")

# How a job process ends, as its supervisor reads it (pipelines/supervisor): a failure it restarts;
# a refusal it does not (the store and the checkpoint disagree: a person must choose); fenced (a
# newer instance holds the lease: the write was rejected); superseded (its queries were stopped
# first, by Spark or by a lost lease).
EXIT_FAILED, EXIT_REFUSED, EXIT_FENCED, EXIT_SUPERSEDED = 1, 2, 3, 4


# ------------------------------------------------------------------ the contract's rules, in Python

class _Pairs(list):
    """A JSON object as its (name, value) pairs, duplicates kept."""


def _depth(text: str) -> int:
    """The deepest nesting of objects and arrays, strings skipped."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _refuse_constant(name):
    raise ValueError(f"{name} is not JSON")


def _plain(value, *, top: bool = False):
    """_Pairs -> dict (ValueError on a nested duplicate or a lone surrogate; a top-level duplicate
    is reported apart)."""
    if isinstance(value, _Pairs):
        names = [k for k, _ in value]
        if len(set(names)) != len(names) and not top:
            raise ValueError("duplicate name in a nested object")
        for k in names:
            _plain(k)
        return {k: _plain(v) for k, v in value}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str) and any("\ud800" <= c <= "\udfff" for c in value):
        raise ValueError("lone surrogate")
    return value


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _integral(value) -> bool:
    d = _number(value)
    return d is not None and math.isfinite(d) and d == math.floor(d)


def dead_letter_reason(payload: bytes | None, now_ms: int | None = None, past_ms: int = 7 * 86_400_000,
                       future_ms: int = 300_000, *, replay: bool = False) -> str | None:
    """Why pipelines/engine/sources.py would dead-letter this payload (None: valid).

    The same rules in the same order, in plain Python: the auditor judges the records it counts
    with it, and the simulator's tests check that every malformed message is caught with its
    reason and every valid one passes. The time window is checked only when `now_ms` (the
    processing time) is given. `replay`: the record carries REPLAY_HEADER (the replay's rules).
    """
    if not payload:
        return "empty payload"
    if len(payload) > MAX_PAYLOAD_BYTES:
        return "oversized payload"
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid UTF-8"
    start = len(text) - len(text.lstrip(" \t\r\n"))
    try:
        if _depth(text) > MAX_JSON_DEPTH:
            raise ValueError("nested too deep")
        # like the JVM's reader: what follows the first JSON value is not read
        raw, _ = json.JSONDecoder(object_pairs_hook=_Pairs, parse_constant=_refuse_constant).raw_decode(text, start)
        doc = _plain(raw, top=True)
    except (ValueError, RecursionError):
        return "malformed JSON"
    if isinstance(raw, _Pairs) and len({k for k, _ in raw}) != len(raw):
        return "duplicate field"
    if not isinstance(doc, dict):
        return "not a JSON object"
    placeless = all(doc.get(name) is None for name in PLACE_FIELDS)
    for name in REQUIRED_TRANSACTION_FIELDS:
        if doc.get(name) is None and not (placeless and name in PLACE_FIELDS):
            return f"missing field {name}"
    for name, kind in TRANSACTION_FIELDS.items():
        value = doc.get(name)
        if value is None:
            continue
        if (isinstance(value, str) if kind is str else _number(value) is not None) is False:
            return f"wrong type for {name}"
    for name, kind in TRANSACTION_FIELDS.items():
        value = doc.get(name)
        if kind is not str or value is None:
            continue
        if name in ID_FIELDS and value.strip(" ") == "":
            return f"empty {name}"
        if len(value.encode("utf-8")) > MAX_ID_BYTES:
            return f"{name} too long"
    currency = doc.get("currency")
    if currency is not None and not re.fullmatch(CURRENCY_FORM, currency, re.ASCII):
        return "currency not ISO 4217"
    amount = doc["amount_cents"]
    if not _integral(amount):
        return "amount_cents not integral"
    if not (0 if replay else 1) <= int(amount) <= MAX_AMOUNT_CENTS:
        return "amount_cents out of range"
    if not placeless:
        lat, lon = _number(doc["lat"]), _number(doc["lon"])
        if not (math.isfinite(lat) and math.isfinite(lon)):
            return "lat/lon not finite"
        if abs(lat) > 90 or abs(lon) > 180:
            return "lat/lon out of range"
    for name in TIME_FIELDS:
        value = doc[name]
        if not _integral(value):
            return f"{name} not integral"
        if now_ms is None:
            continue
        n = int(value)
        if not -2 ** 63 <= n < 2 ** 63:
            return f"{name} too far in the future" if n > 0 else f"{name} too far in the past"
        low = HISTORY_MIN_EVENT_TIME_MS if replay and name == "event_time" else now_ms - past_ms
        reason = time_reason(name, n, low, now_ms + future_ms)
        if reason:
            return reason
    return None
