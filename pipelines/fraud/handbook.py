"""The fraud-detection handbook's protocol as data and plain functions (Le Borgne, Siblini, Lebichot,
Bontempi: "Reproducible Machine Learning for Credit Card Fraud Detection - Practical Handbook",
ULB MLG and Worldline; the facts below are from its chapters 3 to 5, the code is ours).

The protocol (`Protocol`): train on `train_days` days from `train_start`; the next `delay_days`
days are the feedback delay (their labels are not known yet: not trained on); test on the
`test_days` days after. Each test day i (0-based) leaves out the cards known to be compromised by
then: a fraud in the training period or on the first i days of the delay period
(`known_compromised`, `test_frame`). Metrics (`evaluate`, pipelines/fraud/metrics.py): AUC ROC,
average precision, card precision@100. Validation (chapter 5, hold-out): the same protocol shifted
back by `delay_days + test_days` days (`Protocol.validation`), so that its test period is the
last `test_days` days of the real training period and everything it uses was labelled before the
real test starts; prequential validation repeats that shifted back a test period per fold.

Frames here are pandas, one row per payment, in the contract's terms (`history_frame`):
`txn_id`, `card_id`, `merchant_id` (the contract's ids, "hb-<TRANSACTION_ID>", "hb-c<CUSTOMER_ID>",
"hb-t<TERMINAL_ID>" for the handbook, infra/histories.py), `event_time` (datetime64, UTC, no
zone), `amount` (currency units), `label` (1 fraud, 0 genuine: the truth), `scenario` (the
handbook's TX_FRAUD_SCENARIO, 0 genuine). A decision, when there is one, is `is_fraud` (as on the
`decisions` topic) and its score `score`.

Check that this is the handbook's protocol (tests/spark/test_handbook_protocol.py, and
`python -m pipelines.fraud.handbook --baseline`): on 2018-07-25 + 7/7/7 days, the test week after
the exclusions has 58,264 payments and 385 frauds, and a logistic regression on the baseline
features gives AUC ROC 0.870, AP 0.605, CP@100 0.291 (the handbook's 0.871 / 0.606 / 0.291).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from infra.histories import HANDBOOK, ColumnMap
from infra.history import History, load_history
from pipelines.fraud.features import (BASELINE_FEATURES, CARD_FEATURES, CARD_STATE_DAYS, HISTORY_FEATURES,
                                      NIGHT_LAST_HOUR, NO_FRAUD_DAYS, OVER_MEAN_DAYS, PAST_DAYS, RISK_DAYS,
                                      TERMINAL_FEATURES, WINDOW_DAYS)
from pipelines.fraud.metrics import auc_roc, average_precision, card_precision_at_k

DAY = pd.Timedelta(days=1)
TOP_K = 100
# The handbook's logistic regression's inputs: the payment's amount, then the baseline features
# (its chapter 3 puts TX_AMOUNT first among its 15 inputs; BASELINE_FEATURES are the other 14).
AMOUNT = "amount"
HANDBOOK_LR_FEATURES = (AMOUNT,) + BASELINE_FEATURES
# The handbook's baseline protocol
HANDBOOK_TRAIN_START = dt.date(2018, 7, 25)
# Published and reproduced figures (README of ../shared/datasets/handbook)
HANDBOOK_TEST_TRANSACTIONS = 58_264
HANDBOOK_TEST_FRAUDS = 385


class HandbookDataMissing(FileNotFoundError):
    """The dataset is not where the settings say: one sentence naming the place and the setting."""


# ------------------------------------------------------------------ the protocol as data

@dataclass(frozen=True)
class Window:
    """Whole days [start, end): `start` included, `end` excluded."""
    start: dt.date
    end: dt.date

    @property
    def days(self) -> int:
        return (self.end - self.start).days

    def day(self, i: int) -> dt.date:
        return self.start + dt.timedelta(days=i)

    def mask(self, event_time: pd.Series) -> pd.Series:
        return (event_time >= pd.Timestamp(self.start)) & (event_time < pd.Timestamp(self.end))

    @property
    def last(self) -> dt.date:
        """The last day in the window (`end` is the first after it)."""
        return self.end - dt.timedelta(days=1)

    def __str__(self) -> str:
        return f"{self.start.isoformat()}..{self.last.isoformat()}"


def _date(value) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    return dt.date.fromisoformat(str(value))


@dataclass(frozen=True)
class Protocol:
    """Train `train_days` from `train_start`, wait `delay_days`, test `test_days` (whole UTC days)."""
    train_start: dt.date = HANDBOOK_TRAIN_START
    train_days: int = 7
    delay_days: int = 7
    test_days: int = 7

    def __post_init__(self):
        object.__setattr__(self, "train_start", _date(self.train_start))
        for name in ("train_days", "test_days"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least one day.")
        if self.delay_days < 0:
            raise ValueError("delay_days cannot be negative.")

    @property
    def train(self) -> Window:
        return Window(self.train_start, self.train_start + dt.timedelta(days=self.train_days))

    @property
    def delay(self) -> Window:
        return Window(self.train.end, self.train.end + dt.timedelta(days=self.delay_days))

    @property
    def test(self) -> Window:
        return Window(self.delay.end, self.delay.end + dt.timedelta(days=self.test_days))

    @property
    def history_start(self) -> dt.date:
        """The first day the training period's features look at: a card's longest past, or a
        terminal's longest window plus the delay (its windows end `delay_days` before the payment)."""
        return self.train_start - dt.timedelta(days=max(CARD_STATE_DAYS, max(WINDOW_DAYS) + self.delay_days))

    def validation(self) -> "Protocol":
        """The handbook's hold-out validation (ch. 5): the same protocol with training starting
        `delay_days + test_days` earlier; its test period (as long as the real one) is the last
        `test_days` days of the real training period."""
        return replace(self, train_start=self.train_start - dt.timedelta(days=self.delay_days + self.test_days))

    def prequential(self, folds: int = 4) -> list["Protocol"]:
        """The handbook's prequential validation: the validation protocol, then each fold shifted
        back by one more test period (fold 0 is `validation()`)."""
        first = self.validation()
        return [replace(first, train_start=first.train_start - dt.timedelta(days=f * self.test_days))
                for f in range(folds)]

    def describe(self) -> dict:
        return {"train": str(self.train), "delay": str(self.delay), "test": str(self.test),
                "train_days": self.train_days, "delay_days": self.delay_days, "test_days": self.test_days}


# ------------------------------------------------------------------ reading a history

def data_path(settings=None) -> Path:
    """Where the handbook's dataset is: HANDBOOK_DATA (infra/config.py), by default
    ../shared/datasets/handbook/transactions.parquet beside the repository."""
    if settings is None:
        from infra.config import load
        settings = load()
    return Path(settings.handbook_data)


def history_file(path=None) -> Path:
    """The history to read: `path`, else the handbook's (`data_path`). HandbookDataMissing, naming
    the place it looked, when the file is not there."""
    path = Path(path) if path is not None else data_path()
    if not path.exists():
        raise HandbookDataMissing(
            f"the transaction history is not at {path} (set HANDBOOK_DATA, or see ../shared/datasets/handbook/README.md).")
    return path


def history_frame(history: History) -> pd.DataFrame:
    """A history (infra.history.load_history: the replay's reading, mapping and checks, so the
    frame holds exactly the payments a replay sends) -> the frame of this module: txn_id, card_id,
    merchant_id, event_time, amount, label, scenario (the pattern column as read, 0 when the map
    has none), in the file's order."""
    scenario = history.scenario.to_pandas() if history.scenario is not None else pd.Series(0, index=range(len(history)))
    if pd.api.types.is_numeric_dtype(scenario):
        scenario = scenario.astype(int)
    return pd.DataFrame({
        "txn_id": history.txn.to_pandas(),
        "card_id": history.card.to_pandas(),
        "merchant_id": history.merchant.to_pandas(),
        "event_time": pd.to_datetime(history.event_ms, unit="ms").astype("datetime64[ns]"),
        "amount": history.amount,
        "label": history.is_fraud.astype(int),
        "scenario": scenario,
    })


def protocol_rows(path=None, protocol: Protocol = Protocol(), columns: ColumnMap = HANDBOOK) -> pd.DataFrame:
    """The rows a protocol needs: from its features' history start to the end of its test period."""
    return history_frame(load_history(history_file(path), columns, start=protocol.history_start, end=protocol.test.last))


# ------------------------------------------------------------------ exclusions and the test set

def known_compromised(tx: pd.DataFrame, protocol: Protocol) -> list[set]:
    """Per test day i (0 .. test_days-1), the cards left out of it: a fraud in the training period
    or on the first i days after it (the handbook's `get_train_test_set`: the labels known at the
    test day minus the delay). Sets of `card_id`."""
    frauds = tx.loc[tx["label"] == 1, ["event_time", "card_id"]]
    known = set(frauds.loc[protocol.train.mask(frauds["event_time"]), "card_id"])
    out = []
    for i in range(protocol.test_days):
        if i > 0:  # test day i adds delay day i-1: the frauds of the day that ended `delay` before it
            added = Window(protocol.train.end + dt.timedelta(days=i - 1), protocol.train.end + dt.timedelta(days=i))
            known = known | set(frauds.loc[added.mask(frauds["event_time"]), "card_id"])
        out.append(set(known))
    return out


def test_frame(tx: pd.DataFrame, protocol: Protocol) -> pd.DataFrame:
    """The test period's payments after the exclusions, in time order, with `day` (the test day's
    date) and `test_day` (0-based). Keeps every column of `tx` (features, scores, decisions)."""
    known = known_compromised(tx, protocol)
    parts = []
    for i in range(protocol.test_days):
        window = Window(protocol.test.day(i), protocol.test.day(i + 1))
        rows = tx[window.mask(tx["event_time"])]
        rows = rows[~rows["card_id"].isin(known[i])].copy()
        rows["day"] = window.start
        rows["test_day"] = i
        parts.append(rows)
    return pd.concat(parts).sort_values("event_time", kind="mergesort")


test_frame.__test__ = False  # not a pytest test, though its name starts with "test"


def train_frame(tx: pd.DataFrame, protocol: Protocol) -> pd.DataFrame:
    """The training period's payments (all of them: the handbook excludes nothing there)."""
    return tx[protocol.train.mask(tx["event_time"])]


# ------------------------------------------------------------------ the baseline features

def _cents(tx: pd.DataFrame) -> np.ndarray:
    if "amount" in tx.columns:
        return np.round(tx["amount"].to_numpy(dtype=float) * 100).astype(np.int64)
    return tx["amount_cents"].to_numpy(dtype=np.int64)


def _times_s(tx: pd.DataFrame) -> np.ndarray:
    """Event times in whole seconds (datetime64, or integer milliseconds as on the topics)."""
    t = tx["event_time"]
    if pd.api.types.is_integer_dtype(t):
        return t.to_numpy(dtype=np.int64) // 1000
    return pd.to_datetime(t).to_numpy(dtype="datetime64[s]").astype(np.int64)


def _group_sorted(groups: pd.Series, t: np.ndarray):
    """Positions ordered by (group, time, input order), and a searchable int64 key per position."""
    codes, _ = pd.factorize(groups, sort=False)
    codes = codes.astype(np.int64)
    order = np.lexsort((np.arange(len(t)), t, codes))
    t0 = t.min() if len(t) else 0
    rel = t - t0
    key = codes[order] * _stride(t) + rel[order]
    return order, key


def _stride(t: np.ndarray) -> int:
    """A group's keys stay clear of the next group's even after subtracting the longest window."""
    return int(t.max() - t.min() if len(t) else 0) + 86_400 * (max(WINDOW_DAYS) + 400) + 1


def _left(key: np.ndarray, seconds: int) -> np.ndarray:
    """Per position (sorted by group then time): the first position of its group whose time is
    after its own time minus `seconds` (a window (t - seconds, t])."""
    return np.searchsorted(key, key - seconds, side="right")


def baseline_features(tx: pd.DataFrame, delay_days: int = 7) -> pd.DataFrame:
    """The handbook's baseline features of every payment of `tx`, named as BASELINE_FEATURES
    (pipelines/fraud/features.py), floats, indexed like `tx`:

    - is_weekend: the payment's weekday is Saturday or Sunday; is_night: its hour <= 6 (UTC);
    - per card, over (t - w days, t], the payment itself included: c_count_<w>d, the number of
      payments, and c_mean_<w>d, their mean amount (currency units);
    - per terminal, over (t - delay - w days, t - delay]: t_count_<w>d, the number of payments, and
      t_risk_<w>d, the share of them that are frauds (0 when there is none);

    for w in 1, 7, 30 days. Exactly the handbook's pandas rolling windows on a time index (a
    window ends at the payment itself: a later payment of the same second is not in it; equal
    times keep the input order). Vectorised: one sort per key, windows by binary search.
    Needs event_time (datetime64, or integer ms), card_id, merchant_id, amount (or amount_cents)
    and label. A payment's windows see only the rows of `tx`: give it the history they need
    (Protocol.history_start).
    """
    n = len(tx)
    out = pd.DataFrame(index=tx.index)
    t = _times_s(tx)
    when = pd.to_datetime(t, unit="s")
    out["is_weekend"] = (when.weekday >= 5).astype(float)
    out["is_night"] = (when.hour <= NIGHT_LAST_HOUR).astype(float)

    cents = _cents(tx)
    order, key = _group_sorted(tx["card_id"], t)
    position = np.arange(n)
    csum = np.r_[0, np.cumsum(cents[order])]
    card = {}
    for w in WINDOW_DAYS:
        left = _left(key, w * 86_400)
        count = position + 1 - left
        card[f"c_count_{w}d"] = count.astype(float)
        card[f"c_mean_{w}d"] = (csum[position + 1] - csum[left]) / count / 100.0

    labels = tx["label"].to_numpy(dtype=np.int64)
    torder, tkey = _group_sorted(tx["merchant_id"], t)
    fsum = np.r_[0, np.cumsum(labels[torder])]
    end = _left(tkey, delay_days * 86_400)          # payments up to t - delay
    terminal = {}
    for w in WINDOW_DAYS:
        start = _left(tkey, (delay_days + w) * 86_400)
        count = end - start
        frauds = fsum[end] - fsum[start]
        terminal[f"t_count_{w}d"] = count.astype(float)
        terminal[f"t_risk_{w}d"] = np.where(count > 0, frauds / np.maximum(count, 1), 0.0)

    for name in CARD_FEATURES:
        values = np.empty(n)
        values[order] = card[name]
        out[name] = values
    for name in TERMINAL_FEATURES:
        values = np.empty(n)
        values[torder] = terminal[name]
        out[name] = values
    return out[list(BASELINE_FEATURES)]


def history_features(tx: pd.DataFrame, delay_days: int = 7) -> pd.DataFrame:
    """The HISTORY_FEATURES (pipelines/fraud/features.py) of every payment of `tx`, indexed like
    `tx`, computed as History.java computes them (the same integer and floating-point steps, so
    the two agree exactly; tests/spark/test_history_features.py):

    - c_amount_ratio_<w>d: amount x n / s over the card's earlier payments in (t - w, t] (n of
      them, s their cents; the payment itself excluded), 1 when n = 0 or s = 0;
    - c_amount_z_<w>d: (amount x n - s) / sqrt(n x ss - s^2) (ss the sum of squared cents: the
      population z-score), 0 when that root is 0;
    - c_over_mean_<w>d: the card's payments in (t - w, t], this one included, whose amount was
      over 2.5x their own 30-day past mean (2 x amount x n > 5 x s, n > 0);
    - t_risk_<w>d for w in RISK_DAYS as t_risk in `baseline_features`; t_frauds_28d the frauds
      in (t - delay - 28 days, t - delay]; t_days_since_fraud (t - the last fraud at or before
      t - delay) in days, capped at NO_FRAUD_DAYS (also when there is none);
      t_days_since_first_fraud (t - the first fraud in (t - delay - 28 days, t - delay]) in days,
      NO_FRAUD_DAYS when there is none.
    """
    n = len(tx)
    t = _times_s(tx)
    order, card = _card_history(tx, t)
    torder, terminal = _terminal_history(tx, t, delay_days)
    result = pd.DataFrame(index=tx.index)
    for name in HISTORY_FEATURES:
        values = np.empty(n)
        if name.startswith("c_"):
            values[order] = card[name]
        else:
            values[torder] = terminal[name]
        result[name] = values
    return result


def _card_history(tx: pd.DataFrame, t: np.ndarray) -> tuple[np.ndarray, dict]:
    """(the card-sorted order, the card features in that order): `history_features`' c_ columns."""
    cents = _cents(tx).astype(np.int64)
    position = np.arange(len(tx))
    order, key = _group_sorted(tx["card_id"], t)
    a = cents[order].astype(np.int64)
    csum = np.r_[0, np.cumsum(a)]
    csq = np.r_[0, np.cumsum(a * a)]
    af = a.astype(float)
    card = {}
    past = {}
    for w in PAST_DAYS:
        left = _left(key, w * 86_400)
        cnt = (position - left).astype(float)
        sm = (csum[position] - csum[left]).astype(float)
        sq = (csq[position] - csq[left]).astype(float)
        past[w] = (cnt, sm)
        an = af * cnt
        with np.errstate(divide="ignore", invalid="ignore"):
            card[f"c_amount_ratio_{w}d"] = np.where((cnt > 0) & (sm > 0), an / sm, 1.0)
            root = np.sqrt(np.maximum(cnt * sq - sm * sm, 0.0))
            card[f"c_amount_z_{w}d"] = np.where(root > 0, (an - sm) / root, 0.0)
    cnt30, sm30 = past[30]
    over = ((cnt30 > 0) & (2.0 * af * cnt30 > 5.0 * sm30)).astype(np.int64)
    osum = np.r_[0, np.cumsum(over)]
    for w in OVER_MEAN_DAYS:
        left = _left(key, w * 86_400)
        card[f"c_over_mean_{w}d"] = (osum[position + 1] - osum[left]).astype(float)
    return order, card


def _terminal_history(tx: pd.DataFrame, t: np.ndarray, delay_days: int) -> tuple[np.ndarray, dict]:
    """(the terminal-sorted order, the terminal features in that order): `history_features`' t_
    columns, each over labels known `delay_days` before the payment."""
    n = len(tx)
    position = np.arange(n)
    labels = tx["label"].to_numpy(dtype=np.int64)
    torder, tkey = _group_sorted(tx["merchant_id"], t)
    lab = labels[torder]
    fsum = np.r_[0, np.cumsum(lab)]
    end = _left(tkey, delay_days * 86_400)
    terminal = {}
    for w in RISK_DAYS:
        start = _left(tkey, (delay_days + w) * 86_400)
        count = end - start
        frauds = fsum[end] - fsum[start]
        terminal[f"t_risk_{w}d"] = np.where(count > 0, frauds / np.maximum(count, 1), 0.0)
    start = _left(tkey, (delay_days + 28) * 86_400)
    terminal["t_frauds_28d"] = (fsum[end] - fsum[start]).astype(float)
    codes = tkey // _stride(t)
    group_start = np.searchsorted(codes, codes, side="left")
    last = np.maximum.accumulate(np.where(lab == 1, position, -1))
    prev = np.where(end > 0, last[np.maximum(end - 1, 0)], -1)
    known = (prev >= group_start)
    ts = t[torder]
    since = np.where(known, (ts - ts[np.maximum(prev, 0)]) / 86_400.0, NO_FRAUD_DAYS)
    terminal["t_days_since_fraud"] = np.minimum(since, NO_FRAUD_DAYS)
    # the first fraud at or after each position (n past the last): the first of the 28-day window
    following = np.minimum.accumulate(np.where(lab == 1, position, n)[::-1])[::-1]
    first = np.r_[following, n][start]
    in_window = first < end
    terminal["t_days_since_first_fraud"] = np.where(in_window, (ts - ts[np.minimum(first, n - 1)]) / 86_400.0,
                                                    NO_FRAUD_DAYS)
    return torder, terminal


def with_features(tx: pd.DataFrame, delay_days: int = 7) -> pd.DataFrame:
    """`tx` with its BASELINE_FEATURES and HISTORY_FEATURES columns added."""
    return pd.concat([tx, baseline_features(tx, delay_days), history_features(tx, delay_days)], axis=1)


# ------------------------------------------------------------------ evaluation

def _decisions(frame: pd.DataFrame) -> np.ndarray | None:
    if "is_fraud" not in frame.columns:
        return None
    d = frame["is_fraud"]
    if d.isna().any():
        raise ValueError(f"{int(d.isna().sum())} test payments have no decision: count them as undecided and leave them out first.")
    return d.astype(bool).to_numpy()


def join_decisions(test: pd.DataFrame, decisions: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The test payments with their decisions (`decisions`: txn_id, score, is_fraud, e.g. read from
    the `decisions` topic) -> (the decided test payments with `score` and `is_fraud`, ready for
    `evaluate`; {"undecided": test payments without a decision, "duplicates": decision records
    beyond the first of their txn_id}). Decisions of payments outside the test set are ignored; a
    duplicated decision counts once (the first)."""
    cols = [c for c in ("txn_id", "score", "is_fraud") if c in decisions.columns]
    if "txn_id" not in cols or "score" not in cols:
        raise ValueError("decisions need the columns txn_id and score.")
    relevant = decisions.loc[decisions["txn_id"].isin(test["txn_id"]), cols]
    duplicates = int(relevant.duplicated("txn_id").sum())
    first = relevant.drop_duplicates("txn_id", keep="first")
    scored = test.drop(columns=[c for c in ("score", "is_fraud") if c in test.columns]).merge(first, on="txn_id", how="left")
    undecided = scored["score"].isna()
    return scored[~undecided].reset_index(drop=True), {"undecided": int(undecided.sum()), "duplicates": duplicates}


def _plain(value):
    """A scenario as a JSON-friendly key: the handbook's are whole numbers."""
    return int(value) if isinstance(value, (int, np.integer)) else value


def _or_none(f, *args):
    try:
        return round(f(*args), 6)
    except ValueError:
        return None


def evaluate(frame: pd.DataFrame, k: int = TOP_K) -> dict:
    """The protocol's figures over a scored test frame (`test_frame` + `score`, optionally the
    decision `is_fraud`; `day` (or `event_time`), `card_id`, `label`, `scenario`):

    {auc_roc, average_precision, card_precision_at_100, card_precision_at_100_per_day, test_transactions,
     test_frauds, test_compromised_cards, per_scenario: {s: {...}}}, and, with decisions,
    {flagged, precision, recall}.

    per_scenario, for each fraud scenario s present (1 amount over 220, 2 compromised terminal,
    3 compromised card):
    - frauds: the test frauds of that scenario;
    - average_precision / auc_roc: the score's ranking of that scenario's frauds against the
      genuine payments only (the other scenarios' frauds left out): how well the score finds this
      kind of fraud, independent of the others;
    - cards_detected_at_k: the card precision@k hits (a compromised card among a day's k best)
      whose frauds that day include this scenario, out of cards_compromised (the card-days with a
      fraud of this scenario, cards detected earlier left out, as in the metric);
    - recall (with decisions): the share of that scenario's frauds decided `is_fraud`.
    Scores must all be there: an undecided payment is the caller's to count and leave out.
    """
    if "score" not in frame.columns:
        raise ValueError("evaluate needs a `score` column.")
    if frame["score"].isna().any():
        raise ValueError(f"{int(frame['score'].isna().sum())} test payments have no score: count them as undecided and leave them out first.")
    data = frame.copy()
    if "day" not in data.columns:
        data["day"] = pd.to_datetime(data["event_time"]).dt.normalize()
    if "scenario" not in data.columns:
        data["scenario"] = data["label"]
    y = data["label"].to_numpy(dtype=np.int8)
    s = data["score"].to_numpy(dtype=float)
    cp = card_precision_at_k(data, k, day="day", card="card_id", score="score", label="label")
    result = {
        "auc_roc": _or_none(auc_roc, y, s),
        "average_precision": _or_none(average_precision, y, s),
        f"card_precision_at_{k}": round(cp.mean, 6),
        f"card_precision_at_{k}_per_day": [round(v, 6) for v in cp.per_day],
        "test_transactions": int(len(data)),
        "test_frauds": int(y.sum()),
        "test_compromised_cards": int(data.loc[data["label"] == 1, "card_id"].nunique()),
    }
    decided = _decisions(data)
    if decided is not None:
        flagged = int(decided.sum())
        caught = int((decided & (y == 1)).sum())
        result.update(flagged=flagged, precision=round(caught / flagged, 6) if flagged else None,
                      recall=round(caught / int(y.sum()), 6) if y.sum() else None)

    result["per_scenario"] = _per_scenario(data, y, s, decided, *_scenario_card_days(data, cp))
    return result


def _scenario_card_days(data: pd.DataFrame, cp) -> tuple[dict, dict]:
    """Per fraud scenario: the card-days card precision@k detected with a fraud of it, and those
    still in play (the card not detected on an earlier day), as the metric counts them."""
    # which scenarios each detected card-day had
    fraud_rows = data[data["label"] == 1]
    day_card_scen = fraud_rows.groupby(["day", "card_id"])["scenario"].agg(lambda v: set(_plain(x) for x in v))
    detected_scen: dict[int, int] = {}
    for day, cards in zip(cp.days, cp.detected):
        for c in cards:
            for scen in day_card_scen.get((day, c), ()):
                detected_scen[scen] = detected_scen.get(scen, 0) + 1
    # card-days with a fraud of each scenario, still in play (not detected on an earlier day)
    first_detected = {c: i for i, cards in enumerate(cp.detected) for c in cards}
    day_index = {d: i for i, d in enumerate(cp.days)}
    in_play: dict[int, int] = {}
    for (day, c), scens in day_card_scen.items():
        if first_detected.get(c, len(cp.days)) >= day_index[day]:
            for scen in scens:
                in_play[scen] = in_play.get(scen, 0) + 1
    return detected_scen, in_play


def _per_scenario(data: pd.DataFrame, y: np.ndarray, s: np.ndarray, decided, detected_scen: dict,
                  in_play: dict) -> dict:
    """`evaluate`'s per_scenario: each scenario's frauds ranked against the genuine payments only."""
    genuine = y == 0
    per = {}
    for scen in sorted(_plain(v) for v in data.loc[data["label"] == 1, "scenario"].unique()):
        mine = (data["scenario"].to_numpy() == scen) & (y == 1)
        keep = mine | genuine
        entry = {"frauds": int(mine.sum()),
                 "average_precision": _or_none(average_precision, mine[keep], s[keep]),
                 "auc_roc": _or_none(auc_roc, mine[keep], s[keep]),
                 "cards_detected_at_k": detected_scen.get(scen, 0),
                 "cards_compromised": in_play.get(scen, 0)}
        if decided is not None:
            entry["recall"] = round(float(decided[mine].mean()), 6) if mine.any() else None
        per[scen] = entry
    return per


# ------------------------------------------------------------------ the baseline model in MLlib

def fit_baseline_lr(spark, train, features=HANDBOOK_LR_FEATURES, label: str = "label", c: float = 1.0):
    """A logistic regression fitted with Spark MLlib the way the handbook fits scikit-learn's
    default LogisticRegression (C=1, L2, lbfgs) on StandardScaler-standardized features.

    `train`: a pandas or Spark DataFrame with the `features` columns and `label` (0/1). Returns a
    fitted pyspark.ml PipelineModel (VectorAssembler "features_vec" + LogisticRegressionModel,
    coefficients on the raw features' scale); score with `score_lr`.

    Why these settings give scikit-learn's model: scikit-learn minimises
        C * sum_i logloss_i + 1/2 ||w||^2
    and MLlib (elasticNetParam=0, i.e. pure L2)
        1/n * sum_i logloss_i + regParam/2 ||w||^2;
    dividing the first by C*n gives the second with regParam = 1/(C*n). With standardization=True
    MLlib fits, and penalises, the coefficients of the features divided by their standard
    deviation: scikit-learn's penalty on StandardScaler's output (centering changes only the
    intercept, which neither penalises; MLlib's n-1 in the deviation against StandardScaler's n
    changes the penalty by a factor n/(n-1), nothing at these n). A constant feature gets a zero
    coefficient in both. maxIter and tol are MLlib's defaults: on the handbook's training week
    L-BFGS stops after 52 iterations, every test figure the same to 6 decimals as at tol 1e-8.
    """
    from pyspark.sql import functions as F
    from pyspark.ml import PipelineModel
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.feature import VectorAssembler

    features = list(features)
    if isinstance(train, pd.DataFrame):
        cols = features + [label]
        missing = [col for col in cols if col not in train.columns]
        if missing:
            raise ValueError(f"the training frame has no {missing}.")
        train = spark.createDataFrame(train[cols].astype(float))
    assembler = VectorAssembler(inputCols=features, outputCol="features_vec", handleInvalid="error")
    # converted once and kept for the ~50 passes of L-BFGS
    vectors = assembler.transform(train).select("features_vec", F.col(label).cast("double").alias(label)).cache()
    try:
        n = vectors.count()
        if n == 0:
            raise ValueError("the training frame is empty.")
        lr = LogisticRegression(featuresCol="features_vec", labelCol=label, predictionCol="lr_prediction",
                                probabilityCol="lr_probability", rawPredictionCol="lr_raw",
                                family="binomial", regParam=1.0 / (c * n), elasticNetParam=0.0,
                                standardization=True, fitIntercept=True, maxIter=100, tol=1e-6)
        fitted = lr.fit(vectors)
    finally:
        vectors.unpersist()
    return PipelineModel(stages=[assembler, fitted])


def score_lr(model, spark, frame, features=HANDBOOK_LR_FEATURES) -> np.ndarray:
    """The fraud probability of each row of `frame` (pandas: same order; its `features` columns),
    from a model of `fit_baseline_lr`."""
    from pyspark.ml.functions import vector_to_array

    features = list(features)
    pdf = frame[features].astype(float).reset_index(drop=True)
    pdf["_row"] = np.arange(len(pdf), dtype=np.int64)
    scored = model.transform(spark.createDataFrame(pdf))
    got = scored.select("_row", vector_to_array("lr_probability")[1].alias("p")).toPandas()
    return got.sort_values("_row")["p"].to_numpy(dtype=float)   # the row order, whatever Spark's


def lr_summary(model, features=HANDBOOK_LR_FEATURES) -> dict:
    """The fitted logistic regression's intercept and coefficients (raw-feature scale), by name."""
    lr = model.stages[-1]
    return {"intercept": float(lr.intercept),
            "coefficients": dict(zip(features, (float(v) for v in lr.coefficients.toArray())))}


def baseline(spark, path=None, protocol: Protocol = Protocol(), features=HANDBOOK_LR_FEATURES) -> dict:
    """The handbook's baseline end to end, in pandas and MLlib: the rows the protocol needs, their
    features, a logistic regression on the training period, the test period after the exclusions
    scored and evaluated. The figures of `evaluate` plus timings (seconds) and the protocol."""
    started = time.monotonic()
    tx = with_features(protocol_rows(path, protocol), protocol.delay_days)
    features_s = time.monotonic() - started
    train = train_frame(tx, protocol)
    model = fit_baseline_lr(spark, train, features)
    fit_s = time.monotonic() - started - features_s
    test = test_frame(tx, protocol)
    test["score"] = score_lr(model, spark, test, features)
    result = evaluate(test)
    result.update(model="logistic-regression (MLlib)", features=list(features), protocol=protocol.describe(),
                  train_transactions=int(len(train)), train_frauds=int(train["label"].sum()),
                  features_s=round(features_s, 2), fit_s=round(fit_s, 2),
                  wall_s=round(time.monotonic() - started, 2))
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.fraud.handbook",
                                     description="The fraud-detection handbook's protocol on its dataset.")
    parser.add_argument("--baseline", action="store_true",
                        help="fit the handbook's logistic regression (MLlib) and print its test figures as one JSON line")
    parser.add_argument("--data", help="the history file (default: HANDBOOK_DATA)")
    parser.add_argument("--train-start", default=HANDBOOK_TRAIN_START.isoformat())
    parser.add_argument("--train-days", type=int, default=7)
    parser.add_argument("--delay-days", type=int, default=7)
    parser.add_argument("--test-days", type=int, default=7)
    parser.add_argument("--without-amount", action="store_true",
                        help="leave the payment's amount out of the model's inputs (BASELINE_FEATURES only)")
    args = parser.parse_args(argv)
    if not args.baseline:
        parser.print_help()
        return 2
    protocol = Protocol(_date(args.train_start), args.train_days, args.delay_days, args.test_days)
    path = Path(args.data) if args.data else data_path()
    if not path.exists():
        print(f"the transaction history is not at {path} (set HANDBOOK_DATA or pass --data).", file=sys.stderr)
        return 1
    from infra.config import load
    from pipelines.engine.session import get_spark

    spark = get_spark("cardstream-handbook", load())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        features = BASELINE_FEATURES if args.without_amount else HANDBOOK_LR_FEATURES
        result = baseline(spark, path, protocol, features)
    finally:
        spark.stop()
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
