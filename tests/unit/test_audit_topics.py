"""The audit's topic index: a transaction the input contract rejects is never part of the truth,
whatever readable txn_id it carries (the labels alone missed those), and offsets stay whole."""
from __future__ import annotations

import json
from collections import namedtuple

import numpy as np

from infra.config import load
from pipelines.audit import Auditor
from pipelines.audit.topics import INVALID, TopicIndex
from simulator import patterns as P

Record = namedtuple("Record", "value timestamp partition offset")
NOW = 1_790_000_000_000


def valid(txn_id: str) -> dict:
    return {"txn_id": txn_id, "card_id": "c1", "merchant_id": "m1", "amount_cents": 1250, "currency": "EUR",
            "lat": 48.1, "lon": 11.5, "event_time": NOW - 1_000, "produced_at": NOW - 1_000}


def test_a_rejected_record_is_indexed_as_invalid_and_the_rest_by_txn_id():
    s = load()
    auditor = Auditor.__new__(Auditor)  # only its contract check, no Kafka
    auditor.s = s
    index = TopicIndex(s, "transactions", reject=auditor._invalid)
    rng = np.random.default_rng(7)
    sent = [json.dumps(valid("ok-1")).encode()]
    sent += [P.malformed(valid(f"bad-{kind}"), kind, rng)[0] for kind in P.BAD_KINDS]  # the whole corpus
    sent.append(json.dumps(valid("ok-2")).encode())
    for offset, value in enumerate(sent):
        index._add(Record(value, NOW, 0, offset))
    index._flush()
    part = index.partitions()[0]
    assert part.offsets.tolist() == list(range(len(sent)))  # every record indexed: lag counts stay whole
    codes = part.codes.tolist()
    assert codes[0] != INVALID and codes[-1] != INVALID
    assert len(sent) > 3 and codes[1:-1] == [INVALID] * (len(sent) - 2)
    readable = [d for d in map(_doc, sent[1:-1]) if isinstance(d, dict) and isinstance(d.get("txn_id"), str)]
    assert len(readable) > 20  # most malformed records still carry a readable txn_id: none counts


def _doc(value: bytes):
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return None
