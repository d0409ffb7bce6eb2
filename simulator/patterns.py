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

Malformed messages (`BAD_KINDS`), each labelled `bad:<kind>`, match the dead-letter reasons of
pipelines/sources.py: bad JSON (truncated, or key=value text), a missing required field, a wrong
type (text where a number belongs), an absurd value (amount <= 0 or over the limit, lat/lon off
the globe) and an oversized payload (> MAX_PAYLOAD_BYTES).
"""
from __future__ import annotations

import json

import numpy as np

from infra.contracts import MAX_AMOUNT_CENTS, MAX_PAYLOAD_BYTES, REQUIRED_TRANSACTION_FIELDS

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
BAD_KINDS = ("bad-json", "missing-field", "wrong-type", "absurd-value", "oversized")

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


def label(txn_id: str, pattern: str, late: bool = False, raw: str | None = None) -> bytes:
    is_fraud = pattern in FRAUD_PATTERNS
    text = LABEL_FORMAT % (txn_id, "true" if is_fraud else "false", pattern, "true" if late else "false")
    if raw is not None:
        text = text[:-1] + ',"raw":' + json.dumps(raw) + "}"
    return text.encode()


def malformed(fields: dict, kind: str, rng: np.random.Generator) -> tuple[bytes, bool]:
    """A malformed message of `kind` made from a valid transaction: (payload, still has a txn_id)."""
    f = dict(fields)
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


def dead_letter_reason(payload: bytes) -> str | None:
    """Why pipelines/sources.py would send this payload to the dead letters (None: valid).

    The same rules in plain Python, so the simulator's tests can check that every malformed
    message is caught and every valid one passes.
    """
    from infra.contracts import TRANSACTION_FIELDS

    if len(payload) > MAX_PAYLOAD_BYTES:
        return "oversized payload"
    try:
        doc = json.loads(payload)
    except ValueError:
        return "malformed JSON"
    if not isinstance(doc, dict):
        return "malformed JSON"
    for name in REQUIRED_TRANSACTION_FIELDS:
        if doc.get(name) is None:
            return f"missing field {name}"
    for name, kind in TRANSACTION_FIELDS.items():
        value = doc.get(name)
        if value is None or kind is str:
            continue
        try:
            float(value) if kind is float else int(value)
        except (TypeError, ValueError):
            return f"wrong type for {name}"
    if not 0 < int(doc["amount_cents"]) <= MAX_AMOUNT_CENTS:
        return "amount_cents out of range"
    if abs(float(doc["lat"])) > 90 or abs(float(doc["lon"])) > 180:
        return "lat/lon out of range"
    return None
