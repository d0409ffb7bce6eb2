"""bench handbook's figures from a replayed history and the decisions read back (pure)."""
import datetime as dt

import pandas as pd
import pytest

from bench.handbook import figures
from pipelines.fraud.handbook import Protocol

pytestmark = pytest.mark.unit


def history() -> pd.DataFrame:
    rows = []
    for day, hour in ((1, 1), (2, 1), (3, 5), (3, 6), (3, 7), (3, 8)):
        for card in range(4):
            i = len(rows)
            rows.append({"txn_id": f"hb-{i}", "card_id": f"hb-c{card}", "merchant_id": "hb-t1",
                         "event_time": pd.Timestamp(2018, 4, day, hour), "amount": 10.0 + i,
                         "label": int(card == 3 and day == 3) or int(card == 0 and day == 1),
                         "scenario": 1 if card == 3 and day == 3 else (2 if card == 0 and day == 1 else 0)})
    return pd.DataFrame(rows)


def test_undecided_and_duplicates_are_counted_and_the_test_day_scored():
    tx = history()
    protocol = Protocol(dt.date(2018, 4, 1), 1, 1, 1)  # train 04-01, delay 04-02, test 04-03
    decided = tx[tx["txn_id"] != "hb-12"][["txn_id"]].assign(score=lambda f: f.index / 100.0, is_fraud=False)
    decisions = pd.concat([decided, decided[decided["txn_id"] == "hb-20"]])  # one decided twice
    out = figures(tx, decisions, protocol)
    assert (out["undecided"], out["duplicates"], out["decided"], out["replayed"]) == (1, 1, len(tx) - 1, len(tx))
    # test day 04-03: card 0 had a fraud in the training day, so it is left out; hb-12 is card 0's
    assert out["test_undecided"] == 0
    assert out["test_transactions"] == 12 and out["test_frauds"] == 4
    # the later a payment, the higher its score here: card 3's frauds are the latest of each hour
    assert out["auc_roc"] > 0.5 and 0 < out["average_precision"] <= 1
