"""The handbook's protocol as data (pipelines/fraud/handbook.py), on small frames worked by hand:
its windows and validation shift, the test days' exclusions, the baseline features (and against
the handbook's own way of computing them, pandas rolling windows per card and per terminal), the
evaluation's figures, and reading a history file. The protocol on the real dataset, with a model:
tests/spark/test_handbook_protocol.py."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from infra.histories import HANDBOOK
from infra.history import load_history
from pipelines.fraud.features import BASELINE_FEATURES
from pipelines.fraud.handbook import (HandbookDataMissing, Protocol, baseline_features, evaluate, history_features,
                                      history_file, history_frame, join_decisions, known_compromised, protocol_rows,
                                      test_frame)

pytestmark = pytest.mark.unit

D = dt.date


def tx(rows, columns=("event_time", "card_id", "merchant_id", "amount", "label")) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(columns))
    frame["event_time"] = pd.to_datetime(frame["event_time"])
    frame["txn_id"] = [f"x{i}" for i in range(len(frame))]
    if "scenario" not in frame.columns:
        frame["scenario"] = frame["label"]
    return frame


# ------------------------------------------------------------------ the protocol's windows

def test_the_handbook_s_weeks():
    p = Protocol()
    assert (p.train.start, p.train.end) == (D(2018, 7, 25), D(2018, 8, 1))
    assert str(p.train) == "2018-07-25..2018-07-31"
    assert str(p.delay) == "2018-08-01..2018-08-07"
    assert str(p.test) == "2018-08-08..2018-08-14"
    # a card's 60-day past, longer than 30-day terminal windows ending 7 days back (37 days)
    assert p.history_start == D(2018, 5, 26)
    assert Protocol(delay_days=40).history_start == D(2018, 7, 25) - dt.timedelta(days=70)
    assert Protocol("2018-07-25") == p and Protocol(dt.datetime(2018, 7, 25, 13)) == p


def test_validation_is_the_handbook_s_hold_out_shifted_by_delay_plus_test():
    v = Protocol().validation()
    assert str(v.train) == "2018-07-11..2018-07-17"
    assert str(v.delay) == "2018-07-18..2018-07-24"
    assert str(v.test) == "2018-07-25..2018-07-31"       # the real training week
    # four weeks of training: the validation test week is the last week of the real training window
    long = Protocol("2018-07-04", train_days=28)
    assert str(long.train) == "2018-07-04..2018-07-31"
    assert str(long.validation().train) == "2018-06-20..2018-07-17"
    assert str(long.validation().test) == "2018-07-25..2018-07-31"
    assert [str(f.test) for f in Protocol().prequential(3)] == [
        "2018-07-25..2018-07-31", "2018-07-18..2018-07-24", "2018-07-11..2018-07-17"]


def test_nonsense_lengths_are_refused():
    with pytest.raises(ValueError):
        Protocol(train_days=0)
    with pytest.raises(ValueError):
        Protocol(delay_days=-1)


# ------------------------------------------------------------------ exclusions

# train 01-01..01-02, delay 01-03..01-04, test 01-05..01-07
SMALL = Protocol("2020-01-01", train_days=2, delay_days=2, test_days=3)


def exclusion_history() -> pd.DataFrame:
    rows = [
        ("2019-12-31 12:00", "c4", "t", 5.0, 1),   # before training: never excluded
        ("2020-01-02 12:00", "c1", "t", 5.0, 1),   # training: excluded from every test day
        ("2020-01-03 12:00", "c2", "t", 5.0, 1),   # delay day 0: excluded from test days 1, 2
        ("2020-01-04 23:59", "c3", "t", 5.0, 1),   # delay day 1: excluded from test day 2
        ("2020-01-05 08:00", "c5", "t", 5.0, 1),   # test day 0: its label comes after the test
    ]
    for day in ("2020-01-05", "2020-01-06", "2020-01-07"):
        rows += [(f"{day} 10:00", c, "t", 1.0, 0) for c in ("c1", "c2", "c3", "c4", "c5")]
    return tx(rows)


def test_each_test_day_leaves_out_the_cards_known_compromised_by_then():
    known = known_compromised(exclusion_history(), SMALL)
    assert known == [{"c1"}, {"c1", "c2"}, {"c1", "c2", "c3"}]


def test_the_test_frame_is_the_test_days_without_those_cards():
    test = test_frame(exclusion_history(), SMALL)
    by_day = test.groupby("test_day")["card_id"].apply(lambda s: sorted(set(s))).to_dict()
    assert by_day == {0: ["c2", "c3", "c4", "c5"], 1: ["c3", "c4", "c5"], 2: ["c4", "c5"]}
    assert len(test) == 4 + 1 + 3 + 2 and test["label"].sum() == 1    # c5's fraud on day 0
    assert test["day"].tolist()[0] == D(2020, 1, 5)
    assert test["event_time"].is_monotonic_increasing


# ------------------------------------------------------------------ the baseline features by hand

def test_card_windows_include_the_payment_and_open_on_the_left():
    # 2020-01-06 is a Monday
    frame = tx([
        ("2020-01-06 10:00", "A", "t1", 10.0, 0),
        ("2020-01-06 20:00", "A", "t1", 30.0, 0),
        ("2020-01-07 09:00", "A", "t1", 20.0, 0),
        ("2020-01-13 10:00", "A", "t1", 40.0, 0),   # exactly 7 days after the first
        ("2020-01-07 09:00", "B", "t1", 99.0, 0),   # another card: not in A's windows
    ])
    f = baseline_features(frame)
    assert list(f.columns) == list(BASELINE_FEATURES)
    assert f["c_count_1d"].tolist() == [1, 2, 3, 1, 1]
    assert f["c_mean_1d"].tolist() == [10, 20, 20, 40, 99]
    # (01-06 10:00, 01-13 10:00]: the first payment is on the open edge: 30, 20, 40
    assert f.loc[3, "c_count_7d"] == 3 and f.loc[3, "c_mean_7d"] == pytest.approx(30.0)
    assert f.loc[3, "c_count_30d"] == 4 and f.loc[3, "c_mean_30d"] == pytest.approx(25.0)


def test_terminal_windows_end_a_delay_before_the_payment():
    frame = tx([
        ("2020-01-01 10:00", "a", "T", 1.0, 1),
        ("2020-01-02 10:00", "b", "T", 1.0, 0),
        ("2020-01-05 10:00", "c", "T", 1.0, 0),     # t - 7d = 12-29: nothing yet: 0, 0
        ("2020-01-08 10:00", "d", "T", 1.0, 0),     # t - 7d = 01-01 10:00: the fraud is on the edge, in
        ("2020-01-09 12:00", "e", "T", 1.0, 0),     # t - 7d = 01-02 12:00
        ("2020-01-09 12:00", "f", "U", 1.0, 0),     # another terminal
    ])
    f = baseline_features(frame, delay_days=7)
    assert f.loc[2, ["t_count_1d", "t_risk_1d", "t_count_30d", "t_risk_30d"]].tolist() == [0, 0, 0, 0]
    assert f.loc[3, ["t_count_1d", "t_risk_1d", "t_count_7d", "t_risk_7d"]].tolist() == [1, 1, 1, 1]
    # 1 day: (01-01 12:00, 01-02 12:00] holds b only; 7 days: a and b, one fraud of two
    assert f.loc[4, ["t_count_1d", "t_risk_1d", "t_count_7d", "t_risk_7d"]].tolist() == [1, 0, 2, 0.5]
    assert f.loc[5, ["t_count_30d", "t_risk_30d"]].tolist() == [0, 0]
    # a shorter delay sees more recent payments: t - 1d = 01-08 12:00, 1 day: (01-07 12:00, ..] = d
    g = baseline_features(frame, delay_days=1)
    assert g.loc[4, ["t_count_1d", "t_count_7d", "t_count_30d", "t_risk_30d"]].tolist() == [1, 3, 4, 0.25]



def test_a_terminal_s_run_of_known_frauds_from_its_first_and_its_last():
    frame = tx([
        ("2020-01-01 10:00", "a", "T", 1.0, 1),     # a fraud 40 days before the last payment: out of 28 + 7
        ("2020-01-20 10:00", "b", "T", 1.0, 1),     # the run's first fraud
        ("2020-01-25 10:00", "c", "T", 1.0, 1),     # its last known one by 02-10
        ("2020-02-05 10:00", "d", "T", 1.0, 1),     # not known yet (t - 7d = 02-03 10:00)
        ("2020-02-10 10:00", "e", "T", 1.0, 0),
        ("2020-02-10 10:00", "f", "U", 1.0, 0),     # another terminal: none known
        ("2020-01-27 10:00", "g", "T", 1.0, 0),     # t - 7d = 01-20 10:00: b is on the closed edge, in
    ])
    f = history_features(frame, delay_days=7)
    cols = ["t_frauds_28d", "t_days_since_fraud", "t_days_since_first_fraud"]
    # e: its window (01-06 10:00, 02-03 10:00] holds b and c; a is older, d not known yet
    assert f.loc[4, cols].tolist() == [2, 16, 21]
    assert f.loc[5, cols].tolist() == [0, 90, 90]
    # g: (12-23 10:00, 01-20 10:00] holds a and b; b at its closed end
    assert f.loc[6, cols].tolist() == [2, 7, 26]
    # b itself: a, 19 days before, is known (its own fraud is not, for 7 days)
    assert f.loc[1, cols].tolist() == [1, 19, 19]


def test_the_calendar_flags():
    frame = tx([
        ("2020-01-04 12:00", "A", "t", 1.0, 0),     # Saturday
        ("2020-01-05 06:59", "A", "t", 1.0, 0),     # Sunday, hour 6: night
        ("2020-01-06 07:00", "A", "t", 1.0, 0),     # Monday, hour 7: day
        ("2020-01-10 00:00", "A", "t", 1.0, 0),     # Friday, midnight: night
    ])
    f = baseline_features(frame)
    assert f["is_weekend"].tolist() == [1, 1, 0, 0]
    assert f["is_night"].tolist() == [0, 1, 0, 1]


def test_payments_of_the_same_second_see_those_before_them_in_the_input():
    frame = tx([("2020-01-06 10:00", "A", "t", 10.0, 0), ("2020-01-06 10:00", "A", "t", 20.0, 0)])
    assert baseline_features(frame)["c_count_1d"].tolist() == [1, 2]
    # the index and order of the input are kept
    shuffled = frame.iloc[[1, 0]]
    assert baseline_features(shuffled).index.tolist() == [1, 0]


def test_integer_milliseconds_and_cents_are_read_as_the_topics_carry_them():
    frame = tx([("2020-01-06 10:00", "A", "t", 10.0, 0), ("2020-01-06 11:00", "A", "t", 20.5, 0)])
    wire = frame.assign(event_time=frame["event_time"].astype("int64") // 1_000_000,
                        amount_cents=(frame["amount"] * 100).round().astype(int)).drop(columns="amount")
    pd.testing.assert_frame_equal(baseline_features(wire), baseline_features(frame))


def rolling_reference(frame: pd.DataFrame, delay_days: int) -> pd.DataFrame:
    """The handbook's way: per card and per terminal, pandas rolling windows on a time index."""
    out = pd.DataFrame(index=frame.index)
    for w in (1, 7, 30):
        for _, g in frame.groupby("card_id"):
            r = g.set_index("event_time")["amount"].rolling(f"{w}d")
            out.loc[g.index, f"c_count_{w}d"] = r.count().to_numpy()
            out.loc[g.index, f"c_mean_{w}d"] = r.mean().to_numpy()
        for _, g in frame.groupby("merchant_id"):
            s = g.set_index("event_time")["label"]
            near, far = s.rolling(f"{delay_days}d"), s.rolling(f"{delay_days + w}d")
            n = far.count().to_numpy() - near.count().to_numpy()
            k = far.sum().to_numpy() - near.sum().to_numpy()
            out.loc[g.index, f"t_count_{w}d"] = n
            out.loc[g.index, f"t_risk_{w}d"] = np.where(n > 0, k / np.maximum(n, 1), 0.0)
    return out


@pytest.mark.parametrize("delay_days", [7, 3])
def test_the_features_equal_pandas_rolling_windows_on_random_histories(delay_days):
    rng = np.random.default_rng(delay_days)
    n = 3000
    seconds = np.sort(rng.integers(0, 80 * 86_400, n))
    seconds[100:110] = seconds[100]                     # some payments in the same second
    frame = tx(list(zip(pd.Timestamp("2020-02-01") + pd.to_timedelta(seconds, unit="s"),
                        rng.integers(0, 40, n).astype(str), rng.integers(0, 25, n).astype(str),
                        np.round(rng.gamma(2, 30, n), 2), (rng.random(n) < 0.1).astype(int))))
    got = baseline_features(frame, delay_days)
    want = rolling_reference(frame, delay_days)
    for name in BASELINE_FEATURES:
        if name in want:
            np.testing.assert_allclose(got[name].to_numpy(), want[name].to_numpy(), atol=1e-9, err_msg=name)


# ------------------------------------------------------------------ evaluation

def test_evaluate_gives_the_three_figures_and_each_scenario_s():
    rows = [
        # day, card, score, label, scenario, decision
        ("2020-01-05 10:00", "A", 0.9, 1, 1, True),
        ("2020-01-05 11:00", "B", 0.8, 0, 0, True),
        ("2020-01-05 12:00", "C", 0.3, 1, 2, False),
        ("2020-01-05 13:00", "D", 0.1, 0, 0, False),
        ("2020-01-06 10:00", "C", 0.7, 1, 2, True),
        ("2020-01-06 11:00", "E", 0.2, 0, 0, False),
    ]
    frame = pd.DataFrame(rows, columns=["event_time", "card_id", "score", "label", "scenario", "is_fraud"])
    frame["event_time"] = pd.to_datetime(frame["event_time"])
    got = evaluate(frame, k=2)
    # frauds 0.9, 0.3, 0.7 vs genuine 0.8, 0.1, 0.2: pairs won 3 + 2 + 2 = 7 of 9
    assert got["auc_roc"] == pytest.approx(7 / 9, abs=1e-6)
    # descending: 0.9 F (P 1/1, R 1/3), 0.8 G, 0.7 F (P 2/3, R 2/3), 0.3 F (P 3/4, R 1), 0.2 G, 0.1 G
    assert got["average_precision"] == pytest.approx((1 + 2 / 3 + 3 / 4) / 3, abs=1e-6)
    # day 1 top 2: A (fraud), B: 1/2; day 2 top 2: C (fraud), E: 1/2
    assert got["card_precision_at_2"] == pytest.approx(0.5)
    assert got["test_transactions"] == 6 and got["test_frauds"] == 3 and got["test_compromised_cards"] == 2
    assert (got["flagged"], got["precision"], got["recall"]) == (3, pytest.approx(2 / 3, abs=1e-6), pytest.approx(2 / 3, abs=1e-6))
    one, two = got["per_scenario"][1], got["per_scenario"][2]
    assert one == {"frauds": 1, "average_precision": 1.0, "auc_roc": 1.0, "cards_detected_at_k": 1,
                   "cards_compromised": 1, "recall": 1.0}
    # scenario 2 alone against the genuine payments (A left out): 0.8 G, 0.7 F (P 1/2, R 1/2),
    # 0.3 F (P 2/3, R 1): 1/2 * 1/2 + 1/2 * 2/3; pairs won: 0.7 > 0.2, 0.1; 0.3 > 0.2, 0.1: 4 of 6
    assert two["frauds"] == 2 and two["recall"] == 0.5
    assert two["average_precision"] == pytest.approx(0.5 * 0.5 + 0.5 * 2 / 3, abs=1e-6)
    assert two["auc_roc"] == pytest.approx(4 / 6, abs=1e-6)
    # C compromised on both days; not in day 1's top 2, found on day 2
    assert (two["cards_detected_at_k"], two["cards_compromised"]) == (1, 2)


def test_decisions_join_the_test_payments_counting_the_undecided_and_the_duplicated():
    test = pd.DataFrame({"txn_id": ["hb-1", "hb-2", "hb-3"], "day": [1, 1, 1], "card_id": ["A", "B", "C"],
                         "label": [1, 0, 0]})
    decisions = pd.DataFrame({"txn_id": ["hb-1", "hb-1", "hb-3", "hb-99"], "score": [0.9, 0.1, 0.2, 0.5],
                              "is_fraud": [True, False, False, True]})
    scored, counts = join_decisions(test, decisions)
    assert counts == {"undecided": 1, "duplicates": 1}          # hb-2 undecided; hb-1 twice; hb-99 not a test payment
    assert scored[["txn_id", "score", "is_fraud"]].values.tolist() == [["hb-1", 0.9, True], ["hb-3", 0.2, False]]
    assert evaluate(scored, k=1)["recall"] == 1.0


def test_evaluate_refuses_unscored_or_undecided_payments():
    frame = pd.DataFrame({"day": [1, 1], "card_id": ["A", "B"], "score": [0.5, None], "label": [1, 0]})
    with pytest.raises(ValueError, match="no score"):
        evaluate(frame)
    frame["score"] = [0.5, 0.2]
    frame["is_fraud"] = [True, None]
    with pytest.raises(ValueError, match="no decision"):
        evaluate(frame)


# ------------------------------------------------------------------ reading a history

def test_a_missing_history_says_where_it_looked(tmp_path):
    with pytest.raises(HandbookDataMissing, match=str(tmp_path / "nowhere.parquet")):
        history_file(tmp_path / "nowhere.parquet")
    with pytest.raises(HandbookDataMissing, match=str(tmp_path / "nowhere.parquet")):
        protocol_rows(tmp_path / "nowhere.parquet")


def test_the_handbook_s_columns_become_the_contract_s(tmp_path):
    raw = pd.DataFrame({"TRANSACTION_ID": [7, 8, 9],
                        "TX_DATETIME": pd.to_datetime(["2018-04-01 00:00:31", "2018-04-02 10:00:00", "2018-04-03 00:00:00"]),
                        "CUSTOMER_ID": [12, 12, 3], "TERMINAL_ID": [400, 5, 5], "TX_AMOUNT": [57.16, 1.0, 2.5],
                        "TX_FRAUD": [0, 1, 0], "TX_FRAUD_SCENARIO": [0, 2, 0]})
    raw.to_parquet(tmp_path / "h.parquet")
    raw.to_csv(tmp_path / "h.csv", index=False)
    for name in ("h.parquet", "h.csv"):
        got = history_frame(load_history(tmp_path / name, start=dt.date(2018, 4, 2), end=dt.date(2018, 4, 2)))
        assert got.to_dict("records") == [{"txn_id": "hb-8", "card_id": "hb-c12", "merchant_id": "hb-t5",
                                           "event_time": pd.Timestamp("2018-04-02 10:00:00"), "amount": 1.0,
                                           "label": 1, "scenario": 2}]
    assert len(history_frame(load_history(tmp_path / "h.parquet"))) == 3
    # the ids are the replay's (infra/histories.py), so decisions join on them
    assert (HANDBOOK.txn_id_of(8), HANDBOOK.card_of(12), HANDBOOK.merchant_of(5)) == ("hb-8", "hb-c12", "hb-t5")
