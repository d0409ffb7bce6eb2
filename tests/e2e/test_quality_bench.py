"""The quality bench's computation on a tiny hand-made set, through the real fraud job.

`bench.quality.measure` sends the set to the real broker, runs `python -m pipelines.fraud
--available-now` on it and joins its exactly-once decisions with the labels. The figures must be
the ones worked out by hand here, and the ones the analyzers and the aggregator give in plain
Python over the same set (so the bench measures the job, not a copy of it).
"""
from __future__ import annotations

import time

import pytest

from bench.quality import measure, pattern_figures
from pipelines.fraud.aggregator import aggregate
from pipelines.fraud.analyzers import score_transaction

PARIS, TOKYO = (48.8566, 2.3522), (35.6762, 139.6503)
MIN, HOUR = 60_000, 3_600_000


def tiny_set(t0: int):
    rows = []  # (txn_id, card, minutes after t0, amount, place, pattern)
    for k in range(3):  # card testing: three tiny payments a second apart (flagged from the 2nd)
        rows.append((f"ct-{k}", "A", 120 + k / 60, 150, PARIS, "card-testing"))
    for k in range(4):  # ordinary, an hour apart
        rows.append((f"b-{k}", "B", k * 60, 2_500, PARIS, "ordinary"))
    for k in range(3):  # three ordinary payments, then a legitimate purchase of ten times them
        rows.append((f"c-{k}", "C", k * 60, 2_000, PARIS, "ordinary"))
    rows.append(("c-big", "C", 200, 20_000, PARIS, "large-purchase"))
    rows.append(("d-0", "D", 10, 3_000, PARIS, "ordinary"))  # home, then Tokyo 30 minutes later
    rows.append(("d-1", "D", 40, 3_000, TOKYO, "travel-fraud"))
    rows.sort(key=lambda r: r[2])
    txns = [{"txn_id": f"q-{i}", "card_id": f"q-card-{card}-{t0}", "merchant_id": "q-m", "amount_cents": amount,
             "currency": "EUR", "lat": lat, "lon": lon, "event_time": t0 + int(m * MIN)}
            for i, card, m, amount, (lat, lon), _ in rows]
    labels = [{"txn_id": t["txn_id"], "is_fraud": r[5] in ("card-testing", "travel-fraud"), "pattern": r[5]}
              for t, r in zip(txns, rows)]
    return txns, labels


def in_python(txns, labels, threshold):
    profiles, out = {}, []
    for t, l in zip(txns, labels):
        scores, profiles[t["card_id"]] = score_transaction(profiles.get(t["card_id"]), t)
        score, flagged = aggregate(scores, threshold)
        out.append((l["pattern"], l["is_fraud"], score, flagged))
    return pattern_figures(out)


def test_quality_bench_figures_on_a_tiny_set_match_the_hand_and_the_analyzers(kafka, settings, tmp_path):
    txns, labels = tiny_set(int(time.time() * 1000) - 5 * HOUR)
    m = measure(settings, txns, labels, tmp_path / "work")
    assert (m["undecided"], m["duplicates"], m["decided"]) == (0, 0, len(txns))
    assert m["decided_by"] == {"0": len(txns)}  # a fresh store: every decision by the rules, model 0
    f = m["figures"]
    ct = f["card-testing"]
    assert (ct["transactions"], ct["flagged"], ct["recall"]) == (3, 2, round(2 / 3, 4))
    assert ct["precision"] == round(2 / 3, 4)  # the one false alarm: the large purchase
    assert f["travel-fraud"]["flagged"] == 1 and f["travel-fraud"]["precision"] == 0.5
    assert f["large-purchase"]["flagged_share"] == 1.0 and f["ordinary"]["flagged"] == 0
    assert f["all"]["precision"] == 0.75 and f["all"]["recall"] == 0.75
    assert f == in_python(txns, labels, settings.fraud_threshold)
