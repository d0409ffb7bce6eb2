"""The messages the parts exchange, as plain Python: field names, types and sane ranges.

The simulator produces these, the Spark jobs parse them (pipelines/engine/sources.py builds its
Spark schema and its validation from here), the audit and the dashboard read them. One definition, no copies.
"""
from __future__ import annotations

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

# Limits past which a transaction is malformed rather than merely unusual.
MAX_AMOUNT_CENTS = 100_000_000  # one million in the card's currency
MAX_PAYLOAD_BYTES = 16_384      # counted in bytes of the Kafka value, not characters
MAX_ID_BYTES = 128              # txn_id, card_id, merchant_id (and currency), UTF-8 bytes
ID_FIELDS = ("txn_id", "card_id", "merchant_id")
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

# The validation contract (pipelines/engine/sources.py applies it in Spark SQL; the simulator's
# `dead_letter_reason` mirrors it in Python). The first rule a record breaks is its reason; rules
# are checked in this order:
#   empty payload          value null or zero bytes
#   oversized payload      more than MAX_PAYLOAD_BYTES bytes
#   invalid UTF-8          the raw bytes are not UTF-8 (checked on the bytes, before any decoding)
#   duplicate field        a top-level JSON name appears twice
#   malformed JSON         not JSON (incl. NaN/Infinity tokens, a lone surrogate escape, nesting
#                          deeper than MAX_JSON_DEPTH, a byte-order mark, raw control characters)
#   not a JSON object      JSON, but an array, string, number, true/false or null
#   missing field F        a required field absent or null
#   wrong type for F       a string field that is not a JSON string; a number field that is not a
#                          JSON number (a number in a string, "NaN", an object, an array, a boolean)
#   empty F                an id that is empty or only spaces
#   F too long             an id (or currency) longer than MAX_ID_BYTES bytes
#   amount_cents not integral / amount_cents out of range (1..MAX_AMOUNT_CENTS)
#   lat/lon not finite / lat/lon out of range (|lat| <= 90, |lon| <= 180)
#   T not integral         a time with a fraction
#   T in seconds / T in microseconds / T in nanoseconds
#                          not inside the window in milliseconds, but inside it in that unit
#   T too far in the past / T too far in the future
#                          outside the window [now - VALIDATION_PAST_SECONDS,
#                          now + VALIDATION_FUTURE_SECONDS] (now: the batch's processing time)


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

ANALYZERS = ("avg_ticket", "proximity", "velocity")

# Decision (topic `decisions` and store table `decisions`)
DECISION_FIELDS: dict[str, type] = {
    "txn_id": str, "card_id": str, "merchant_id": str, "amount_cents": int, "event_time": int,
    "produced_at": int, "decided_at": int,
    **{f"score_{name}": float for name in ANALYZERS},
    "score": float, "is_fraud": bool, "is_late": bool,
}

GUARANTEES = ("at-most-once", "at-least-once", "exactly-once")
# The real-time fraud path's guarantees (Spark's Kafka sink cannot be transactional there, so no
# exactly-once): at-most-once restarts from the latest offsets, at-least-once from its checkpoint.
RT_GUARANTEES = ("at-most-once", "at-least-once")
