"""The fraud standby's rehearsal records (pipelines.fraud.job.rehearsal_rows): the decisions plan's two
sources, transactions and labels, as the job reads them, in batches."""
from __future__ import annotations

import json

import pytest

from pipelines.fraud.job import REHEARSAL_BATCHES, rehearsal_rows, split

NOW = 1_800_000_000_000


def decoded(batches):
    return [json.loads(row[1]) for batch in batches for row in batch]


@pytest.mark.parametrize("n", [1, 32, 6000])
def test_the_transactions_come_in_the_rehearsal_batches_in_event_order(n):
    txns, labels = rehearsal_rows(NOW, n)
    assert len(txns) == REHEARSAL_BATCHES and all(txns)
    records = decoded(txns)
    assert len(records) == max(n, REHEARSAL_BATCHES)
    times = [r["event_time"] for r in records]
    assert times == sorted(times) and times[-1] < NOW
    offsets = [row[4] for batch in txns for row in batch]
    assert offsets == sorted(set(offsets))  # as Kafka's: each once, in order
    # cards pay more than once and terminals see several cards: the state is read back, not only written
    assert len({r["card_id"] for r in records}) < len(records) or n < 4
    assert len({r["merchant_id"] for r in records}) < len({r["card_id"] for r in records}) or n < 32


def test_every_tenth_transaction_has_a_label_naming_its_terminal_and_time_in_fewer_batches():
    txns, labels = rehearsal_rows(NOW, 600)
    assert 1 <= len(labels) < len(txns) and all(labels)
    paid = {r["txn_id"]: r for r in decoded(txns)}
    told = decoded(labels)
    assert len(told) == 60
    for label in told:
        payment = paid[label["txn_id"]]
        assert (label["merchant_id"], label["event_time"]) == (payment["merchant_id"], payment["event_time"])
    assert {label["is_fraud"] for label in told} == {True, False}


@pytest.mark.parametrize("n, parts, sizes", [(10, 3, [4, 4, 2]), (3, 3, [1, 1, 1]), (2, 3, [1, 1]), (7, 1, [7])])
def test_split_keeps_the_order_and_makes_no_empty_part(n, parts, sizes):
    rows = list(range(n))
    out = split(rows, parts)
    assert [len(p) for p in out] == sizes
    assert sum(out, []) == rows
