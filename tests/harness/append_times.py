"""Transactions and their decisions written to real topics for the Overview's latency (the broker
stamps each with its append time, LogAppendTime), and those append times read back plainly, so a
test computes the figures the page must show without the page's code."""
from __future__ import annotations

import json

from controlplane.clock import now_ms
from infra import kafka_client


def transaction(txn: str, produced_at: int) -> bytes:
    """A transaction as the simulator sends it, stamped `produced_at` before it is sent."""
    return json.dumps(transaction_doc(txn, produced_at)).encode()


def transaction_doc(txn: str, produced_at: int) -> dict:
    """The transaction `txn` ("tx-P-I": at terminal m-(I mod 9))."""
    tail = txn.rsplit("-", 1)[-1]
    return {"txn_id": txn, "card_id": "card-1", "merchant_id": f"m-{int(tail) % 9 if tail.isdigit() else 1}",
            "amount_cents": 1_000, "currency": "EUR", "lat": 48.85, "lon": 2.35, "event_time": produced_at - 40,
            "produced_at": produced_at}


def decision(txn: str, produced_at: int) -> bytes:
    """A decision record as the fraud job writes it (the fields the Overview reads among them): its
    transaction's `produced_at` carried over."""
    return json.dumps({"txn_id": txn, "card_id": "card-1", "event_time": produced_at - 40, "produced_at": produced_at,
                       "decided_at": now_ms(), "score": 0.1, "is_fraud": False, "is_late": False}).encode()


def appended(s, topic: str) -> dict[str, int]:
    """{txn_id: the broker's append time} of a topic's first record per txn_id, read back plainly
    (read_committed); AssertionError on a record not stamped by the broker."""
    out: dict[str, int] = {}
    for m in kafka_client.read_to_end(topic, s):
        assert m.timestamp_type == 1, f"{topic} is not stamped with the broker's append time"
        try:
            txn = json.loads(m.value)["txn_id"]
        except (ValueError, KeyError, TypeError):
            continue
        out.setdefault(txn, m.timestamp)
    return out


def latencies(s, transactions: str, decisions: str) -> dict[str, int]:
    """{txn_id: its decision's append time - its transaction's}, from the records themselves."""
    t, d = appended(s, transactions), appended(s, decisions)
    return {k: d[k] - t[k] for k in d if k in t}
