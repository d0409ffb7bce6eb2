"""The fraud-detection handbook's three test metrics, in plain numpy and pandas.

- `auc_roc(y, score)`: the area under the ROC curve, i.e. the Mann-Whitney statistic: the chance
  that a random fraud scores above a random genuine payment, a tie counting one half (ranks of
  equal scores are averaged). Equal to scikit-learn's `roc_auc_score`.
- `average_precision(y, score)`: scikit-learn's `average_precision_score`: over the distinct score
  thresholds, highest first, sum of (R_n - R_(n-1)) * P_n, R and P the recall and precision of
  "score >= threshold" (payments of equal score enter together; no interpolation).
- `card_precision_at_k(frame, k)`: the handbook's card precision@k (Le Borgne et al., ch. 4.2,
  `card_precision_top_k` with `remove_detected_compromised_cards=True`): each day a card's score is
  the highest score of its payments that day and the card is compromised that day if any of them is
  a fraud; the k best-scored cards are the day's alerts; precision = compromised among them / k
  (k, even on a day with fewer cards); a card found compromised in an earlier day's top k is left
  out of the later days (an investigator has it already); the figure is the mean over the days.

No scikit-learn at run time: the tests check these against hand-worked examples and against
scikit-learn's implementations (tests/unit/test_metrics.py).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd


def _arrays(y, score) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y)
    s = np.asarray(score, dtype=float)
    if y.ndim != 1 or s.ndim != 1 or len(y) != len(s):
        raise ValueError(f"labels and scores must be two 1-D arrays of one length, not {y.shape} and {s.shape}.")
    if len(s) and not np.isfinite(s).all():
        raise ValueError(f"{int((~np.isfinite(s)).sum())} scores are missing or not finite: score every payment first.")
    if y.dtype == bool:
        y = y.astype(np.int8)
    if len(y) and not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be 0/1 (or booleans).")
    return y.astype(np.int8), s


def average_ranks(values) -> np.ndarray:
    """1-based ranks of `values` in ascending order, equal values sharing their average rank."""
    v = np.asarray(values, dtype=float)
    n = len(v)
    order = np.argsort(v, kind="mergesort")
    ordered = v[order]
    first = np.r_[True, ordered[1:] != ordered[:-1]] if n else np.zeros(0, bool)
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    ends = np.r_[starts[1:], n]              # a group holds sorted positions starts..ends-1
    mean_rank = (starts + 1 + ends) / 2.0    # mean of the ranks starts+1 .. ends
    ranks = np.empty(n)
    ranks[order] = mean_rank[group]
    return ranks


def auc_roc(y, score) -> float:
    """Area under the ROC curve as the Mann-Whitney U statistic over n_pos * n_neg pairs.

    AUC = (sum of the frauds' ranks - n_pos (n_pos + 1) / 2) / (n_pos n_neg), ranks ascending by
    score with ties averaged: a fraud and a genuine payment of equal score count one half.
    Raises ValueError when one class is absent (the area is undefined, as in scikit-learn).
    """
    y, s = _arrays(y, score)
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("AUC ROC needs both frauds and genuine payments; one class is absent.")
    rank_sum = average_ranks(s)[y == 1].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def precision_recall_steps(y, score) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(thresholds descending, precision, recall) of "score >= threshold" at each distinct score."""
    y, s = _arrays(y, score)
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    last_of_group = np.r_[s[1:] != s[:-1], True] if len(s) else np.zeros(0, bool)
    idx = np.flatnonzero(last_of_group)
    tps = np.cumsum(y, dtype=np.int64)[idx]
    flagged = idx + 1
    total = int(y.sum())
    precision = tps / flagged
    recall = tps / total if total else np.full(len(idx), np.nan)
    return s[idx], precision, recall


def average_precision(y, score) -> float:
    """scikit-learn's average precision: sum over thresholds of (R_n - R_(n-1)) * P_n, R_0 = 0.

    Raises ValueError when there is no fraud (recall undefined).
    """
    y, s = _arrays(y, score)
    if int(y.sum()) == 0:
        raise ValueError("average precision needs at least one fraud; there is none.")
    _, precision, recall = precision_recall_steps(y, s)
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


class CardPrecision(NamedTuple):
    """card_precision_at_k's answer: per day (in day order) and the mean over the days."""
    per_day: list[float]           # compromised cards among the day's k alerts / k
    mean: float                    # the handbook's figure: the mean of per_day
    days: list                     # the days, ascending
    detected: list[list]           # per day, the compromised cards in its top k (left out after)
    compromised_cards: list[int]   # per day, compromised cards still in play (the most the top k can find)
    boundary_ties: list[int]       # per day, cards outside the top k with the k-th card's score:
                                   # > 0 means the day's figure depends on how ties are broken


def card_precision_at_k(frame: pd.DataFrame, k: int = 100, *, day: str = "day", card: str = "card",
                        score: str = "score", label: str = "label") -> CardPrecision:
    """The handbook's card precision@k over the days of `frame` (one row per payment).

    Columns (names adjustable): `day` (anything orderable: a date, a day index), `card`, `score`,
    `label` (1 fraud, 0 genuine). Each day, after leaving out the cards detected on earlier days:
    a card's score is its highest score that day, its label the highest label (compromised if any
    fraud); the k highest-scored cards are taken, equal scores ordered by card id ascending (the
    handbook leaves that order to pandas' unstable sort; `boundary_ties` says when it matters);
    precision = compromised cards among them / k; those compromised cards are detected and left
    out of the later days. The mean over the days is the handbook's figure.
    """
    if k <= 0:
        raise ValueError("k must be a positive number of cards.")
    missing = [c for c in (day, card, score, label) if c not in frame.columns]
    if missing:
        raise ValueError(f"card precision@k needs the columns {missing}.")
    _arrays(frame[label].to_numpy(), frame[score].to_numpy())  # same checks as the other metrics
    data = frame[[day, card, score, label]]
    detected_so_far: set = set()
    out = CardPrecision([], 0.0, [], [], [], [])
    for d, rows in data.groupby(day, sort=True):
        rows = rows[~rows[card].isin(detected_so_far)]
        per_card = rows.groupby(card, sort=True).agg(score=(score, "max"), label=(label, "max"))
        per_card = per_card.reset_index().sort_values(["score", card], ascending=[False, True], kind="mergesort")
        top = per_card.head(k)
        found = top.loc[top["label"] == 1, card].tolist()
        kth = top["score"].iloc[-1] if len(top) else None
        ties = int((per_card["score"].iloc[k:] == kth).sum()) if kth is not None else 0
        out.per_day.append(len(found) / k)
        out.days.append(d)
        out.detected.append(found)
        out.compromised_cards.append(int((per_card["label"] == 1).sum()))
        out.boundary_ties.append(ties)
        detected_so_far.update(found)
    mean = float(np.mean(out.per_day)) if out.per_day else float("nan")
    return out._replace(mean=mean)
