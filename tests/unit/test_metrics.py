"""The handbook's metrics (pipelines/fraud/metrics.py) against examples worked by hand and against a
second implementation: scikit-learn's roc_auc_score and average_precision_score (tests only), and
for card precision@k a literal loop written here from the handbook's definition."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from pipelines.fraud.metrics import auc_roc, average_precision, average_ranks, card_precision_at_k

pytestmark = pytest.mark.unit


# ------------------------------------------------------------------ AUC ROC by hand

def test_auc_counts_the_pairs_a_fraud_wins():
    # frauds 0.35, 0.8; genuine 0.1, 0.4. Pairs (fraud, genuine): 0.35>0.1 yes, 0.35>0.4 no,
    # 0.8>0.1 yes, 0.8>0.4 yes: 3 of 4.
    assert auc_roc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75)


def test_a_tie_between_a_fraud_and_a_genuine_payment_counts_one_half():
    # frauds 0.5, 0.9; genuine 0.5, 0.2. Pairs: 0.5 vs 0.5 tie = 1/2, 0.5>0.2 = 1, 0.9>0.5 = 1,
    # 0.9>0.2 = 1: 3.5 / 4. By ranks: 0.2 -> 1, the two 0.5 -> 2.5 each, 0.9 -> 4; frauds' rank sum
    # 2.5 + 4 = 6.5, minus 2*3/2 = 3.5, over 2*2.
    assert auc_roc([0, 1, 0, 1], [0.5, 0.5, 0.2, 0.9]) == pytest.approx(0.875)
    assert average_ranks([0.5, 0.5, 0.2, 0.9]).tolist() == [2.5, 2.5, 1.0, 4.0]


def test_all_equal_scores_give_one_half_and_a_perfect_ranking_one():
    assert auc_roc([0, 1, 0, 1, 1], [3, 3, 3, 3, 3]) == pytest.approx(0.5)
    assert auc_roc([0, 0, 1, 1], [0.1, 0.2, 0.3, 0.4]) == pytest.approx(1.0)
    assert auc_roc([1, 1, 0, 0], [0.1, 0.2, 0.3, 0.4]) == pytest.approx(0.0)
    assert auc_roc([True, False], [2.0, 1.0]) == pytest.approx(1.0)  # booleans are labels too


def test_auc_is_undefined_with_one_class_and_refuses_missing_scores():
    with pytest.raises(ValueError, match="one class"):
        auc_roc([1, 1], [0.1, 0.2])
    with pytest.raises(ValueError, match="not finite"):
        auc_roc([0, 1], [0.1, float("nan")])
    with pytest.raises(ValueError, match="0/1"):
        auc_roc([0, 2], [0.1, 0.2])


# ------------------------------------------------------------------ average precision by hand

def test_average_precision_steps_through_the_thresholds():
    # scores descending 0.8 (fraud), 0.4 (genuine), 0.35 (fraud), 0.1 (genuine):
    #   >= 0.8 : P = 1/1, R = 1/2   -> (1/2 - 0) * 1   = 0.5
    #   >= 0.4 : P = 1/2, R = 1/2   -> 0
    #   >= 0.35: P = 2/3, R = 2/2   -> (1 - 1/2) * 2/3 = 1/3
    #   >= 0.1 : P = 2/4, R = 1     -> 0
    # AP = 0.5 + 1/3 = 0.8333 (no interpolation: not the 11-point or the "max precision to the right")
    assert average_precision([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(5 / 6)


def test_payments_of_equal_score_enter_together():
    # 0.9: a fraud and a genuine payment enter together: P = 1/2, R = 1/2 -> 1/4
    # 0.5: a fraud and a genuine: P = 2/4, R = 1 -> 1/2 * 1/2 = 1/4;  0.1: R unchanged -> 0
    assert average_precision([1, 0, 1, 0, 0], [0.9, 0.9, 0.5, 0.5, 0.1]) == pytest.approx(0.5)
    # a perfect ranking: 1; one fraud ranked last of four: P = 1/4 at R = 1
    assert average_precision([1, 1, 0], [0.9, 0.8, 0.1]) == pytest.approx(1.0)
    assert average_precision([0, 0, 0, 1], [0.9, 0.8, 0.7, 0.1]) == pytest.approx(0.25)


def test_average_precision_needs_a_fraud():
    with pytest.raises(ValueError, match="at least one fraud"):
        average_precision([0, 0], [0.1, 0.2])


# ------------------------------------------------------------------ against scikit-learn

@pytest.mark.parametrize("seed", range(12))
def test_auc_and_average_precision_equal_scikit_learn_on_random_data(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5000))
    y = (rng.random(n) < rng.uniform(0.005, 0.5)).astype(int)
    y[rng.choice(n, 2, replace=False)] = (0, 1)   # both classes, at random places
    score = rng.normal(size=n) + y * rng.uniform(0, 2)
    if seed % 3 == 0:
        score = np.round(score, 1)          # many ties
    elif seed % 3 == 1:
        score = rng.integers(0, 4, size=n)  # a handful of distinct scores, like a rule's
    assert auc_roc(y, score) == pytest.approx(roc_auc_score(y, score), abs=1e-12)
    assert average_precision(y, score) == pytest.approx(average_precision_score(y, score), abs=1e-12)


def test_a_fraud_share_as_low_as_the_handbook_s():
    rng = np.random.default_rng(7)
    y = (rng.random(60_000) < 0.0066).astype(int)
    score = 1 / (1 + np.exp(-(rng.normal(size=y.size) + 2.5 * y)))
    assert auc_roc(y, score) == pytest.approx(roc_auc_score(y, score), abs=1e-12)
    assert average_precision(y, score) == pytest.approx(average_precision_score(y, score), abs=1e-12)


# ------------------------------------------------------------------ card precision@k by hand

def frame(rows):
    return pd.DataFrame(rows, columns=["day", "card", "score", "label"])


WORKED = frame([
    # day 1: A's score is its best, 0.9, and A is compromised (its 0.2 payment is a fraud);
    # top 2 = A (fraud), B (genuine): 1/2; A is detected
    (1, "A", 0.9, 0), (1, "A", 0.2, 1), (1, "B", 0.8, 0), (1, "C", 0.7, 1),
    # day 2: A (0.95, fraud) is left out, detected on day 1; top 2 of C, D, E = C (fraud), D: 1/2
    (2, "A", 0.95, 1), (2, "C", 0.6, 1), (2, "D", 0.5, 0), (2, "E", 0.1, 1),
    # day 3: one card, compromised: 1/k = 1/2 (divided by k even with fewer cards)
    (3, "F", 0.3, 1),
])


def test_card_precision_worked_by_hand():
    got = card_precision_at_k(WORKED, k=2)
    assert got.per_day == [0.5, 0.5, 0.5]
    assert got.mean == pytest.approx(0.5)        # with A counted again on day 2 it would be 2/3
    assert got.days == [1, 2, 3]
    assert got.detected == [["A"], ["C"], ["F"]]
    assert got.compromised_cards == [2, 2, 1]    # day 1: A, C; day 2 (A out): C, E; day 3: F
    assert got.boundary_ties == [0, 0, 0]


def test_equal_card_scores_are_ordered_by_card_and_reported_when_they_straddle_k():
    # three cards at 0.5 for two places: X and Y (by id) are taken; the figure depends on the order
    day = frame([(1, "Z", 0.5, 1), (1, "Y", 0.5, 0), (1, "X", 0.5, 0), (1, "W", 0.1, 1)])
    got = card_precision_at_k(day, k=2)
    assert got.per_day == [0.0] and got.boundary_ties == [1]


def test_column_names_are_the_caller_s():
    renamed = WORKED.rename(columns={"day": "d", "card": "card_id", "score": "p", "label": "y"})
    got = card_precision_at_k(renamed, k=2, day="d", card="card_id", score="p", label="y")
    assert got.mean == pytest.approx(0.5)
    with pytest.raises(ValueError, match="columns"):
        card_precision_at_k(WORKED, k=2, card="card_id")


def literal_card_precision(frame: pd.DataFrame, k: int) -> tuple[list[float], float]:
    """The handbook's definition, read literally, in plain Python (dicts and sorted())."""
    detected: set = set()
    per_day = []
    for day in sorted(frame["day"].unique()):
        best: dict = {}
        bad: dict = {}
        for _, r in frame[frame["day"] == day].iterrows():
            if r["card"] in detected:
                continue
            best[r["card"]] = max(best.get(r["card"], -np.inf), r["score"])
            bad[r["card"]] = max(bad.get(r["card"], 0), r["label"])
        top = sorted(best, key=lambda c: -best[c])[:k]
        found = [c for c in top if bad[c] == 1]
        per_day.append(len(found) / k)
        detected.update(found)
    return per_day, float(np.mean(per_day))


@pytest.mark.parametrize("seed", range(5))
def test_card_precision_equals_the_literal_reading_on_random_days(seed):
    rng = np.random.default_rng(100 + seed)
    n = 1500
    rows = pd.DataFrame({"day": rng.integers(0, 7, n), "card": rng.integers(0, 200, n),
                         "score": rng.random(n), "label": (rng.random(n) < 0.08).astype(int)})
    k = int(rng.integers(5, 40))
    per_day, mean = literal_card_precision(rows, k)
    got = card_precision_at_k(rows, k=k)
    assert got.per_day == pytest.approx(per_day) and got.mean == pytest.approx(mean)
