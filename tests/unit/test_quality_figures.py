"""The quality bench's arithmetic (bench/quality.py) and the latency bench's (bench/latency.py):
average precision as scikit-learn computes it, figures per pattern, the join with the labels,
end-to-end latency from append times with undecided and duplicated decisions counted; where the
quality bench's learned model is trained (never on the evaluation set, labels only after the delay)."""
from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from bench.latency import behind_schedule, latency_figures
from bench.quality import DAY_MS, average_precision, join, pattern_figures, training_plan, training_set
from pipelines.fraud import handbook
from simulator import evaluation


def test_average_precision_by_hand():
    # ranked: + (P 1) - + (P 2/3) -  -> (1/2)*1 + (1/2)*(2/3)
    assert average_precision([True, False, True, False], [0.9, 0.8, 0.7, 0.1]) == pytest.approx(5 / 6)
    assert average_precision([True, True], [0.5, 0.2]) == 1.0
    assert average_precision([False, False], [0.5, 0.2]) is None


def test_average_precision_takes_tied_scores_as_one_step():
    # all tied: one threshold, precision 1/2 at recall 1 (not 1.0 nor 0.5 by chance of the order)
    assert average_precision([True, False], [0.0, 0.0]) == 0.5
    assert average_precision([False, True], [0.0, 0.0]) == 0.5
    # 0.9 (+), then 0.3 tied (+ - -): 1/2 * 1 + 1/2 * 2/4
    assert average_precision([True, True, False, False], [0.9, 0.3, 0.3, 0.3]) == pytest.approx(0.75)


def test_pattern_figures_measure_each_fraud_pattern_against_every_legitimate_transaction():
    rows = [("card-testing", True, 0.9, True), ("card-testing", True, 0.2, False),
            ("travel-fraud", True, 0.8, True),
            ("ordinary", False, 0.75, True), ("ordinary", False, 0.1, False), ("ordinary", False, 0.0, False),
            ("flight", False, 0.3, False), ("flight", False, 0.0, False)]
    f = pattern_figures(rows)
    ct = f["card-testing"]
    assert (ct["transactions"], ct["flagged"], ct["precision"], ct["recall"]) == (2, 1, 0.5, 0.5)
    # ranked: 0.9 +, 0.75 -, 0.3 -, 0.2 +, ... -> 1/2 * 1 + 1/2 * 2/4
    assert ct["average_precision"] == 0.75
    tf = f["travel-fraud"]
    assert (tf["precision"], tf["recall"]) == (0.5, 1.0) and tf["average_precision"] == 1.0
    assert f["ordinary"]["flagged_share"] == round(1 / 3, 4) and f["ordinary"]["precision"] is None
    assert f["flight"]["flagged"] == 0 and f["flight"]["kind"] == "legitimate"
    a = f["all"]
    assert (a["transactions"], a["flagged"], a["precision"], a["recall"]) == (3, 2, round(2 / 3, 4), round(2 / 3, 4))
    assert list(f)[:2] == ["card-testing", "travel-fraud"] and list(f)[-1] == "all"


def test_join_counts_undecided_and_duplicated_decisions():
    labels = [{"txn_id": "a", "is_fraud": True, "pattern": "card-testing"},
              {"txn_id": "b", "is_fraud": False, "pattern": "ordinary"},
              {"txn_id": "c", "is_fraud": False, "pattern": "ordinary"}]
    decisions = [{"txn_id": "a", "score": 0.9, "is_fraud": True}, {"txn_id": "a", "score": 0.9, "is_fraud": True},
                 {"txn_id": "b", "score": 0.1, "is_fraud": False}]
    rows, undecided, duplicates = join(labels, decisions)
    assert rows == [("card-testing", True, 0.9, True), ("ordinary", False, 0.1, False)]
    assert undecided == ["c"] and duplicates == 1


def test_latency_is_decision_append_minus_transaction_append_and_nothing_is_dropped_silently():
    tx = {"a": 1_000, "b": 1_010, "c": 900, "d": 1_020}
    decisions = [("a", 1_050), ("b", 1_110), ("a", 1_400), ("c", 950), ("prime-0", 10)]
    f = latency_figures(tx, decisions, expected={"a", "b", "c", "d"}, since_ms=1_000)
    assert f["measured"] == 2 and f["p50_ms"] == 50 and f["max_ms"] == 100   # c: warm-up, d: undecided
    assert f["undecided"] == 1 and f["undecided_ids"] == ["d"]
    assert f["duplicates"] == 1                                               # a decided twice: counted


def test_behind_schedule_takes_off_the_clock_anchor():
    tx = {"a": 1_500, "b": 2_500, "c": 3_900}
    assert behind_schedule(tx, {"a": 1_000, "b": 2_000, "c": 3_000}) == 400   # anchor 500, c sent 400 late
    assert behind_schedule(tx, {}) is None


def test_the_model_trains_on_other_traffic_whose_labels_are_known_before_the_evaluation_starts():
    end = int(dt.datetime(2026, 11, 25, 14, 30, tzinfo=dt.timezone.utc).timestamp() * 1000)
    start = end - 3 * DAY_MS                                          # the evaluation: 11-22 14:30 .. 11-25 14:30
    plan = training_plan(start, 3.0, 7, evaluation.SEED)
    assert (plan.train_from, plan.train_to) == (dt.date(2026, 11, 9), dt.date(2026, 11, 14))
    # train's default --as-of (the day after --to plus the delay): the model is live before the set
    as_of = dt.datetime.combine(plan.train_to + dt.timedelta(days=1 + 7), dt.time(), dt.timezone.utc)
    assert plan.as_of_ms == int(as_of.timestamp() * 1000) <= start
    seeds = [g.seed for g in plan.segments]
    assert len(set(seeds)) == 4 and evaluation.SEED not in seeds
    # two segments fill the training window, two train's validation window (shifted back 7 + 6 days)
    protocol = handbook.Protocol(plan.train_from, 6, 7, 6)
    windows = [protocol.validation().train] * 2 + [protocol.train] * 2
    txns, labels = training_set(plan, 30)
    for g, w in zip(plan.segments, windows):
        times = [t["event_time"] for t in txns if t["txn_id"].startswith(f"{g.prefix}-{g.seed}-")]
        assert times and w.mask(pd.Series(pd.to_datetime(times, unit="ms"))).all()
    assert [t["event_time"] for t in txns] == sorted(t["event_time"] for t in txns)
    assert max(t["event_time"] for t in txns) < plan.as_of_ms
    assert all(lab["known_at"] == lab["event_time"] + 7 * DAY_MS for lab in labels)
    assert [lab["txn_id"] for lab in labels] == [t["txn_id"] for t in txns]
    assert any(lab["is_fraud"] for lab in labels)
    # nothing of the evaluation set: not a payment, a card or a terminal
    ev_txns, _ = evaluation.evaluation_set(evaluation.SEED, 30, end, 3.0)
    for field in ("txn_id", "card_id", "merchant_id"):
        assert not {t[field] for t in txns} & {t[field] for t in ev_txns}
