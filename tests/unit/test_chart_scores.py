"""The Fraud page's heatmap of the newest flagged transactions: one row per transaction, even when
their ids share a long prefix (the simulator's run id), as they do in every run."""
from __future__ import annotations

import pandas as pd

from dashboard import charts


def flagged(ids):
    return pd.DataFrame({"txn_id": ids, "score_avg_ticket": 0.0, "score_proximity": 1.0, "score_velocity": 0.0,
                         "score": 1.0})


def test_twenty_transactions_of_one_run_are_twenty_rows():
    fig = charts.scores(flagged([f"ce7cc6d8-{i:010d}" for i in range(7_400, 7_420)]))
    (heat,) = fig.data
    assert len(heat.y) == 20 == len(set(heat.y)) and heat.z.shape == (20, 4)
    assert "newest 20" in fig.layout.title.text


def test_long_ids_keep_their_distinct_tail_and_short_ones_stay_whole():
    assert charts.txn_labels(pd.Series(["t-1", "t-2"])) == ["t-1", "t-2"]
    long = [f"{'x' * 30}-{i}" for i in range(3)]
    labels = charts.txn_labels(pd.Series(long))
    assert len(set(labels)) == 3 and all(len(label) == 20 and label.startswith("…") for label in labels)
    # tails that would collide fall back to the whole ids
    same_tail = [f"{p}{'y' * 25}" for p in ("a", "b")]
    assert charts.txn_labels(pd.Series(same_tail)) == same_tail
