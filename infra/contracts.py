"""The messages the parts exchange, as plain Python: field names, types and sane ranges.

The simulator produces these, the Spark jobs parse them (pipelines/sources.py builds its Spark
schema from here), the audit and the dashboard read them. One definition, no copies.
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
MAX_PAYLOAD_BYTES = 16_384

# Label (topic `labels`, key = txn_id): ground truth, never in the payload the detector reads.
# pattern: "normal", "spend-spike", "impossible-travel", "card-testing", or "bad:<kind>" for a malformed
# message. is_late: the event reached Kafka one to two lags after it happened (lateness is orthogonal to
# the pattern). A malformed message whose payload has no readable txn_id also carries `raw`, the
# exact payload sent, so it can be matched with its dead letter.
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
