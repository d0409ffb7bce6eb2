"""What one payment looks like: ordinary amounts, the three fraud patterns, malformed messages.

Each pattern is shaped for the analyzer meant to catch it (pipelines/analyzers.py) and, as far as
it can be, for none of the others:

- ordinary: amount lognormal around the card's typical spend (sigma `NORMAL_SIGMA` = 0.3, so 99.9 %
  of amounts are under 2.5x it and the average-ticket analyzer stays at 0), at a merchant of the
  card's home city (never 50 km from the card's other payments).
- spend spike (average ticket): `SPIKE_FACTOR` 15..40 x the card's typical spend, at home, and
  only on a card with at least `SPIKE_MIN_HISTORY` (3) ordinary payments this run, the history the
  analyzer needs before it has an opinion.
- impossible travel (proximity): an ordinary-sized payment in a city at least 3,000 km from home,
  `TRAVEL_MIN_GAP_MS` (10 s) to `TRAVEL_MAX_GAP_MS` (2 min) of event time after the card's last
  ordinary payment at home: over 90,000 km/h. Not sooner, or the velocity analyzer's 5 s burst
  window would flag it too; only in the stream's first 10 s, or above ~400 tx/s, where no home
  payment that old is remembered, does it follow the newest one.
- card testing (velocity): a burst of `BURST_SIZE` (10..16) tiny payments (1.00..2.99) at one
  merchant of the home city, each at most `BURST_MAX_GAP_MS` (3 s) after the previous: 10+ in
  under 50 s. A windowed counter can only flag a burst from its 6th or 7th payment on.

Malformed messages (`BAD_KINDS`), each labelled `bad:<kind>`, one per way a card network's feed
can break the validation contract (infra/contracts.py; pipelines/engine/sources.py applies it):
shapes (not JSON, not an object, nested too deep, the transaction wrapped in another object),
encodings (invalid UTF-8, Latin-1, UTF-16, overlong and surrogate sequences, a byte-order mark,
lone surrogate escapes, raw control characters), NaN/Infinity, wrong types (numbers or objects as
ids, numbers as text), empty, blank and too long ids (counted in bytes), absurd amounts, clock
units (seconds, microseconds, nanoseconds) and times far in the past or the future, a field twice
with another value, and sizes (over the limit in bytes but not in characters, 200 KB of invalid
UTF-8, a 900 KB body). `BAD_REASONS[kind]` is the dead-letter reason each kind gets (for the five
original kinds, which vary at random, a part of it). The `bad-input` fault sends them in turn, so
a press of 50 shows every kind; `--bad-rate` draws them at random.
"""
from __future__ import annotations

import base64
import json

import numpy as np

from infra.contracts import MAX_AMOUNT_CENTS, MAX_ID_BYTES, MAX_JSON_DEPTH, MAX_PAYLOAD_BYTES, REQUIRED_TRANSACTION_FIELDS

NORMAL_SIGMA = 0.3
MIN_AMOUNT_CENTS = 50
SPIKE_FACTOR = (15.0, 40.0)
SPIKE_MIN_HISTORY = 3
TRAVEL_MIN_GAP_MS = 10_000
TRAVEL_MAX_GAP_MS = 120_000
BURST_SIZE = (10, 16)            # inclusive
BURST_AMOUNT_CENTS = (100, 299)  # inclusive
BURST_MAX_GAP_MS = 3_000

NORMAL, SPIKE, TRAVEL, TESTING = "normal", "spend-spike", "impossible-travel", "card-testing"
FRAUD_PATTERNS = (SPIKE, TRAVEL, TESTING)
DAY_MS = 86_400_000
# kind -> its dead-letter reason (the first five vary at random: a part of their reason)
BAD_REASONS = {
    # the original five
    "bad-json": "malformed JSON", "missing-field": "missing field", "wrong-type": "wrong type",
    "absurd-value": "out of range", "oversized": "oversized payload",
    # shapes
    "empty": "empty payload", "blank": "malformed JSON", "json-array": "not a JSON object",
    "json-string": "not a JSON object", "json-null": "not a JSON object",
    "nested-transaction": "missing field txn_id", "deep-nesting": "malformed JSON",
    # encodings
    "invalid-utf8": "invalid UTF-8", "latin-1": "invalid UTF-8", "utf-16": "invalid UTF-8",
    "overlong-utf8": "invalid UTF-8", "cesu-surrogate": "invalid UTF-8", "bom": "malformed JSON",
    "lone-surrogate": "malformed JSON", "control-char": "malformed JSON",
    # NaN and Infinity
    "nan": "malformed JSON", "infinity": "malformed JSON", "nan-string": "wrong type for lat",
    "huge-exponent": "lat/lon not finite",
    # types
    "null-field": "missing field card_id", "numeric-id": "wrong type for txn_id",
    "object-id": "wrong type for card_id", "array-amount": "wrong type for amount_cents",
    "string-amount": "wrong type for amount_cents", "string-time": "wrong type for event_time",
    # ids
    "empty-id": "empty txn_id", "blank-id": "empty card_id", "long-id": "txn_id too long",
    "long-id-multibyte": "card_id too long",
    # amounts
    "zero-amount": "amount_cents out of range", "fractional-amount": "amount_cents not integral",
    "huge-amount": "amount_cents out of range",
    # clocks
    "event-seconds": "event_time in seconds", "event-micros": "event_time in microseconds",
    "event-nanos": "event_time in nanoseconds", "produced-nanos": "produced_at in nanoseconds",
    "far-past": "event_time too far in the past", "far-future": "event_time too far in the future",
    "overflow-time": "event_time too far in the future", "fractional-time": "event_time not integral",
    # a field twice, with another value
    "duplicate-id": "duplicate field", "duplicate-amount": "duplicate field",
    # sizes, in bytes
    "oversized-multibyte": "oversized payload", "huge-900k": "oversized payload",
    "invalid-utf8-200k": "oversized payload",
}
BAD_KINDS = tuple(BAD_REASONS)
RANDOM_KINDS = BAD_KINDS[:5]  # their reason varies with the draw; BAD_REASONS holds a part of it

TX_FORMAT = ('{"txn_id":"%s","card_id":"%s","merchant_id":"%s","amount_cents":%d,"currency":"%s",'
             '"lat":%.5f,"lon":%.5f,"event_time":%d,"produced_at":')
LABEL_FORMAT = '{"txn_id":"%s","is_fraud":%s,"pattern":"%s","is_late":%s}'


def normal_amount(typical: float, z: float) -> int:
    """An ordinary amount: typical x exp(sigma z), z standard normal."""
    return max(MIN_AMOUNT_CENTS, int(round(typical * np.exp(NORMAL_SIGMA * z))))


def spike_amount(typical: float, u: float) -> int:
    low, high = SPIKE_FACTOR
    return min(MAX_AMOUNT_CENTS, int(round(typical * (low + (high - low) * u))))


def tx_prefix(txn_id: str, card_id: str, merchant_id: str, amount: int, currency: str,
              lat: float, lon: float, event_time: int) -> bytes:
    """The transaction's JSON up to `"produced_at":`; the producer appends the send time and `}`."""
    return (TX_FORMAT % (txn_id, card_id, merchant_id, amount, currency, lat, lon, event_time)).encode()


def stamp(prefix: bytes, produced_at: int) -> bytes:
    return prefix + b"%d}" % produced_at


def label(txn_id: str, pattern: str, late: bool = False, raw: str | bytes | None = None) -> bytes:
    """A label; `raw` (the payload, for a message with no readable txn_id) is kept as text, or as
    base64 with `"raw_encoding": "base64"` when it is not valid UTF-8."""
    is_fraud = pattern in FRAUD_PATTERNS
    text = LABEL_FORMAT % (txn_id, "true" if is_fraud else "false", pattern, "true" if late else "false")
    if raw is not None:
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = text[:-1] + ',"raw_encoding":"base64"}'
                raw = base64.b64encode(raw).decode("ascii")
        text = text[:-1] + ',"raw":' + json.dumps(raw) + "}"
    return text.encode()


def _json(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _with(f: dict, **changes) -> bytes:
    return _json({**f, **changes})


def _utf8(f: dict, **changes) -> bytes:
    """Like `_with`, with non-ASCII characters as UTF-8 bytes rather than \\u escapes."""
    return json.dumps({**f, **changes}, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _spliced(f: dict, name: str, raw: bytes) -> bytes:
    """The transaction with `raw` bytes put verbatim as the JSON value of `name`."""
    return _with(f, **{name: "\x00SPLICE\x00"}).replace(b'"\\u0000SPLICE\\u0000"', raw)


def _in_string(f: dict, name: str, raw: bytes) -> bytes:
    """The transaction with `raw` bytes put verbatim at the start of the string value of `name`."""
    return _spliced(f, name, b'"' + raw + str(f[name]).encode() + b'"')


def _appended(f: dict, raw: bytes) -> bytes:
    """The transaction with `raw` (`,"name":value`) added verbatim before its closing brace."""
    return _json(f)[:-1] + raw + b"}"


_BUILDERS = {
    "empty": lambda f: b"",
    "blank": lambda f: b" \n\t ",
    "json-array": lambda f: _json([f]),
    "json-string": lambda f: _json(f["txn_id"]),
    "json-null": lambda f: b"null",
    "nested-transaction": lambda f: _json({"transaction": f}),
    "deep-nesting": lambda f: _appended(f, b',"extra":' + b"[" * (3 * MAX_JSON_DEPTH) + b"]" * (3 * MAX_JSON_DEPTH)),
    "invalid-utf8": lambda f: _in_string(f, "merchant_id", b"\xff\xfe"),
    "latin-1": lambda f: json.dumps({**f, "merchant_id": "Caf\u00e9 " + f["merchant_id"]},
                                    ensure_ascii=False).encode("latin-1"),
    "utf-16": lambda f: json.dumps(f).encode("utf-16"),
    "overlong-utf8": lambda f: _in_string(f, "merchant_id", b"\xc0\xaf"),
    "cesu-surrogate": lambda f: _in_string(f, "merchant_id", b"\xed\xa0\x80"),
    "bom": lambda f: b"\xef\xbb\xbf" + _json(f),
    "lone-surrogate": lambda f: _with(f, merchant_id="\ud800" + f["merchant_id"]),
    "control-char": lambda f: _in_string(f, "merchant_id", b"\x00\x01"),
    "nan": lambda f: _spliced(f, "lat", b"NaN"),
    "infinity": lambda f: _spliced(f, "lon", b"-Infinity"),
    "nan-string": lambda f: _with(f, lat="NaN"),
    "huge-exponent": lambda f: _spliced(f, "lat", b"1e400"),
    "null-field": lambda f: _with(f, card_id=None),
    "numeric-id": lambda f: _with(f, txn_id=int("".join(c for c in f["txn_id"] if c.isdigit()) or "0")),
    "object-id": lambda f: _with(f, card_id={"id": f["card_id"], "issuer": "cardstream"}),
    "array-amount": lambda f: _with(f, amount_cents=[f["amount_cents"], f["amount_cents"]]),
    "string-amount": lambda f: _with(f, amount_cents=str(f["amount_cents"])),
    "string-time": lambda f: _with(f, event_time=str(f["event_time"])),
    "empty-id": lambda f: _with(f, txn_id=""),
    "blank-id": lambda f: _with(f, card_id="   "),
    "long-id": lambda f: _with(f, txn_id=f["txn_id"] + "-" + "x" * (2 * MAX_ID_BYTES)),
    "long-id-multibyte": lambda f: _utf8(f, card_id="\u20ac" * (MAX_ID_BYTES // 3 + 10)),  # few chars, many bytes
    "zero-amount": lambda f: _with(f, amount_cents=0),
    "fractional-amount": lambda f: _with(f, amount_cents=f["amount_cents"] + 0.5),
    "huge-amount": lambda f: _with(f, amount_cents=10 ** 30),
    "event-seconds": lambda f: _with(f, event_time=f["event_time"] // 1_000),
    "event-micros": lambda f: _with(f, event_time=f["event_time"] * 1_000),
    "event-nanos": lambda f: _with(f, event_time=f["event_time"] * 1_000_000),
    "produced-nanos": lambda f: _with(f, produced_at=f["produced_at"] * 1_000_000),
    "far-past": lambda f: _with(f, event_time=f["event_time"] - 30 * DAY_MS),
    "far-future": lambda f: _with(f, event_time=f["event_time"] + DAY_MS),
    "overflow-time": lambda f: _with(f, event_time=2 ** 70),
    "fractional-time": lambda f: _with(f, event_time=f["event_time"] + 0.5),
    "duplicate-id": lambda f: _appended(f, b',"txn_id":' + _json(f["txn_id"] + "-again")),
    "duplicate-amount": lambda f: _appended(f, b',"amount_cents":-5'),
    "oversized-multibyte": lambda f: _utf8(f, note="\u20ac" * (MAX_PAYLOAD_BYTES // 3 + 500)),
    "huge-900k": lambda f: _with(f, note="x" * 900_000),
    "invalid-utf8-200k": lambda f: _appended(f, b',"note":"' + b"\xff" * 200_000 + b'"'),
}
assert set(_BUILDERS) | set(RANDOM_KINDS) == set(BAD_KINDS)


def has_txn_id(payload: bytes, txn_id: str) -> bool:
    """Whether the payload is a JSON object whose txn_id reads as `txn_id` (else its label carries it)."""
    try:
        doc = json.loads(payload.decode("utf-8"))
    except (ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and doc.get("txn_id") == txn_id


def malformed(fields: dict, kind: str, rng: np.random.Generator) -> tuple[bytes, bool]:
    """A malformed message of `kind` made from a valid transaction: (payload, still has a txn_id).

    Times are derived from the transaction's own `event_time` / `produced_at`, so a clock-unit
    kind is wrong in the same way whenever it is sent.
    """
    f = dict(fields)
    if kind in _BUILDERS:
        payload = _BUILDERS[kind](f)
        return payload, has_txn_id(payload, f["txn_id"])
    if kind == "bad-json":
        text = json.dumps(f, separators=(",", ":"))
        if rng.random() < 0.7:  # truncated: a strict prefix of a JSON object is never valid JSON
            return text[: int(rng.integers(len(text) // 3, len(text) - 1))].encode(), False
        return ";".join(f"{k}={v}" for k, v in f.items()).encode(), False
    if kind == "missing-field":
        del f[REQUIRED_TRANSACTION_FIELDS[int(rng.integers(len(REQUIRED_TRANSACTION_FIELDS)))]]
    elif kind == "wrong-type":
        name, value = [("amount_cents", f"{f['amount_cents'] / 100:.2f} {f['currency']}"),
                       ("lat", "north"), ("lon", "east"), ("event_time", "yesterday")][int(rng.integers(4))]
        f[name] = value
    elif kind == "absurd-value":
        choice = int(rng.integers(4))
        if choice == 0:
            f["amount_cents"] = -f["amount_cents"]
        elif choice == 1:
            f["amount_cents"] = MAX_AMOUNT_CENTS * int(rng.integers(10, 10_000))
        elif choice == 2:
            f["lat"] = float(rng.choice([-1, 1])) * float(rng.uniform(91, 999))
        else:
            f["lon"] = float(rng.choice([-1, 1])) * float(rng.uniform(181, 9999))
    elif kind == "oversized":
        f["note"] = "x" * (MAX_PAYLOAD_BYTES + int(rng.integers(100, 4000)))
    else:
        raise ValueError(f"unknown kind of malformed message: {kind!r}")
    return json.dumps(f, separators=(",", ":")).encode(), "txn_id" in f
