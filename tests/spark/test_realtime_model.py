"""The real-time path decides with the model in use (issue 35 item 3): LiveModel.java computes
the model's features by name (amount and calendar from the payment, the analyzers and card windows
from the live profile, the terminal's from the table the stateful companion publishes) and scores
them with the exported model. The same features through MLlib's own transform give the same
score to 1e-9; a payment whose features cannot be served is decided by the rules, saying why."""
from __future__ import annotations

import json
import uuid

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipelines.fraud import models, realtime, seed, train
from pipelines.fraud.analyzers import DEFAULT_LIMITS
from pipelines.fraud.features import (CARD_FEATURES, CARD_PAST_FEATURES, OVER_MEAN_DAYS, PAST_DAYS,
                                      TERMINAL_FEATURES, TERMINAL_FRAUD_FEATURES, WINDOW_DAYS)

pytestmark = pytest.mark.spark

DAY = 86_400_000
T0 = 1_533_081_600_000  # 2018-08-01 00:00 UTC, a Wednesday
# features of every kind the real-time path serves (the terminal's: any the companion publishes)
TERMINALS = TERMINAL_FEATURES + TERMINAL_FRAUD_FEATURES
FEATURES = ("amount", "is_weekend", "is_night", *CARD_FEATURES, *CARD_PAST_FEATURES, *TERMINALS,
            "score_avg_ticket", "score_proximity", "score_velocity")
DDL = ("txn_id string, card_id string, merchant_id string, amount_cents long, lat double, lon double, "
       "event_time long, partition int, offset long, produced_at long, ts_ms long")


def training_frame(n: int, seed_: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed_)
    frame = pd.DataFrame({f: rng.random(n) for f in FEATURES})
    frame["amount"] = rng.gamma(2.0, 40.0, n)
    for d in WINDOW_DAYS:
        frame[f"c_count_{d}d"] = rng.poisson(d, n).astype(float)
        frame[f"c_mean_{d}d"] = rng.gamma(2.0, 40.0, n)
    frame["label"] = (((frame["t_risk_7d"] > 0.6) & (frame["amount"] > frame["c_mean_30d"] * 1.5))
                      | (rng.random(n) < 0.02)).astype(int)
    return frame


def payments(n_cards=6, per_card=12, seed_=3):
    """Cards paying at three terminals over ~40 days, interleaved in event-time order."""
    rng = np.random.default_rng(seed_)
    rows = []
    for c in range(n_cards):
        t = T0
        for _ in range(per_card):
            t += int(rng.integers(1, 5 * DAY))
            rows.append((f"card-{c}", f"term-{int(rng.integers(0, 3))}", int(rng.integers(500, 30_000)), t))
    rows.sort(key=lambda r: r[3])
    return [(f"tx{i}", card, term, amount, 48.85, 2.35, t, 0, i, t, t) for i, (card, term, amount, t) in enumerate(rows)]


def card_windows(rows) -> pd.DataFrame:
    """The card features by brute force, from their definitions (features.py): each card's folded
    payments in (t - w days, t], the payment included for the windows, excluded for its past."""
    out, over = [], {}
    for i, r in enumerate(rows):
        t, a = r[6], r[3]
        earlier = [(x[6], x[3], x[8]) for x in rows[:i] if x[1] == r[1]]
        values = {}
        for d in WINDOW_DAYS:
            inside = [v for u, v, _ in earlier + [(t, a, r[8])] if t - d * DAY < u <= t]
            values[f"c_count_{d}d"] = float(len(inside))
            values[f"c_mean_{d}d"] = sum(inside) / 100.0 / len(inside)
        for d in PAST_DAYS:
            past = [v for u, v, _ in earlier if t - d * DAY < u <= t]
            n, s, ss = len(past), float(sum(past)), float(sum(v * v for v in past))
            values[f"c_amount_ratio_{d}d"] = a * n / s if n and s else 1.0
            root = np.sqrt(max(n * ss - s * s, 0.0))
            values[f"c_amount_z_{d}d"] = (a * n - s) / root if root > 0 else 0.0
            if d == 30:
                over[r[8]] = 1 if n and 2.0 * a * n > 5.0 * s else 0
        for d in OVER_MEAN_DAYS:
            values[f"c_over_mean_{d}d"] = float(sum(over[o] for u, _, o in earlier + [(t, a, r[8])]
                                                    if t - d * DAY < u <= t))
        out.append(values)
    return pd.DataFrame(out)


def seed_path(tmp_path, snapshot=None, folds=None):
    scope = f"test-{uuid.uuid4().hex[:8]}"
    plan = seed.Plan(starts=folds or {0: 0}, folds=folds or {0: 0}, holes={})
    return str(seed.write(tmp_path / f"{scope}.tsv",
                          seed.seed_lines(scope, snapshot or seed.Snapshot(), plan, DEFAULT_LIMITS, 86_400_000, 1)))


def publish(tmp_path, version, fitted, terminals: dict, max_gap_ms: int = realtime.TERMINAL_MAX_GAP_MS,
            complete_from=None) -> str:
    """The model's export, the terminal table the companion would publish and the serving file."""
    folder = tmp_path / f"v{version}"
    explain = models.linear_explain(fitted, training_frame(500, 9), FEATURES) if version == 1 else None
    fitted.write().overwrite().save(str(folder))
    models.write_export(fitted, FEATURES, folder, explain)
    table = realtime.TerminalTable(tmp_path / realtime.TERMINALS_FILE, 7 * DAY, complete_from)
    names = list(TERMINALS)
    table.update(pa.table({"merchant_id": list(terminals), "event_time": [v[0] for v in terminals.values()],
                           **{n: [v[1][k] for v in terminals.values()] for k, n in enumerate(names)}}))
    served, why, text = realtime.serving_lines(version, 0.5, str(folder), tmp_path)
    assert (served, why) == (version, None)
    path = tmp_path / f"serving-{uuid.uuid4().hex[:6]}.tsv"
    path.write_text(text.replace(f"terminal_max_gap_ms\t{realtime.TERMINAL_MAX_GAP_MS}", f"terminal_max_gap_ms\t{max_gap_ms}"))
    return str(path)


def decide(spark, rows, seed_file, serving):
    from pyspark.sql import functions as F

    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 1), DDL)
    df = df.select("*", F.timestamp_millis("ts_ms").alias("kafka_ts"))
    return realtime.decisions(df, seed_file, None, 0.7, 60_000, serving).toPandas()


@pytest.mark.parametrize("version,kind", [(1, "logistic-regression"), (2, "gradient-boosted-trees")])
def test_the_real_time_path_scores_as_mllib_on_the_same_features(spark, tmp_path, version, kind):
    estimator = next(e for k, _, e in train.candidates() if k == kind)
    if kind == "gradient-boosted-trees":
        estimator.setMaxIter(20)
    fitted = train.fit(spark, estimator, training_frame(3_000, 1), FEATURES)
    rows = payments()
    last = rows[-1][6]
    rng = np.random.default_rng(5)
    terminals = {f"term-{k}": (last, [float(v) for v in rng.random(len(TERMINALS))]) for k in range(2)}
    # every payment served from the table (its gap rule: the other test); term-2 is absent from a
    # table complete since the topic's start: it had no payment, its features are the empty ones
    empty = [realtime.empty_terminal(n) for n in TERMINALS]
    got = decide(spark, rows, seed_path(tmp_path),
                 publish(tmp_path, version, fitted, terminals, 100 * DAY, realtime.EVER))
    assert list(got["model_version"]) == [version] * len(rows) and got["model_why"].isna().all()
    # the expected features: the same definitions, computed here
    frame = card_windows(rows)
    frame["amount"] = [r[3] / 100.0 for r in rows]
    ts = pd.to_datetime([r[6] for r in rows], unit="ms")
    frame["is_weekend"] = ts.dayofweek.isin([5, 6]).astype(float)
    frame["is_night"] = (ts.hour <= 6).astype(float)
    for k, n in enumerate(TERMINALS):
        frame[n] = [terminals[r[2]][1][k] if r[2] in terminals else empty[k] for r in rows]
    for n in ("score_avg_ticket", "score_proximity", "score_velocity"):
        frame[n] = got[n].to_numpy()  # the live analyzers (tests/spark/test_fraud_sql.py checks them)
    want = train.score(spark, fitted, frame, FEATURES)
    np.testing.assert_allclose(got["score"].to_numpy(), want, rtol=0, atol=1e-9)
    assert (got["is_fraud"] == (got["score"] >= 0.5)).all()
    assert frame["is_weekend"].nunique() == 2 and frame["c_count_30d"].max() >= 3
    assert frame["c_over_mean_14d"].max() >= 1 and frame["c_amount_z_60d"].abs().max() > 1
    reasons = [json.loads(e) for e in got["explanation"]]
    assert all(len(r) == 3 and 0 < sum(x["share"] for x in r) <= 1.0001 for r in reasons)
    assert {x["feature"] for r in reasons for x in r} <= set(FEATURES)


def test_what_the_real_time_path_cannot_serve_is_decided_by_the_rules_saying_why(spark, tmp_path):
    fitted = train.fit(spark, next(e for k, _, e in train.candidates() if k == "logistic-regression"),
                       training_frame(2_000, 2), FEATURES)
    rows = payments(n_cards=3, per_card=6)
    last = rows[-1][6]
    # term-0 published long before the payments; term-1 just now; term-2 not at all
    serving = publish(tmp_path, 1, fitted, {"term-0": (last - 30 * DAY, [0.1] * len(TERMINALS)),
                                            "term-1": (last, [0.2] * len(TERMINALS))})
    recent = [r for r in rows if r[6] >= last - realtime.TERMINAL_MAX_GAP_MS]
    got = decide(spark, rows, seed_path(tmp_path), serving).set_index("txn_id")
    for r in rows:
        d = got.loc[r[0]]
        if r[2] == "term-1" and r in recent:
            assert d["model_version"] == 1 and pd.isna(d["model_why"])
        else:
            assert d["model_version"] == 0 and "decided with the rules (model 0)" in d["model_why"]
            assert ("has no features" in d["model_why"]) == (r[2] == "term-2")
            assert [x["feature"] for x in json.loads(d["explanation"])][0].startswith("score_")
    assert (got["model_version"] == 0).sum() > len(rows) // 2
    # a real-time start after the stateful path's snapshot: its card windows begin there, so none
    # of the model's 30 days is whole yet -> the rules, said
    snap = seed.Snapshot(as_of=0, ends={0: 1_000}, profiles=[])
    later = [(*r[:8], r[8] + 1_000, *r[9:]) for r in rows]
    got = decide(spark, later, seed_path(tmp_path, snap, folds={0: 1_000}), serving).set_index("txn_id")
    young = [r[0] for r in later if r[6] - 30 * DAY < later[0][6]]
    assert young and (got.loc[young, "model_version"] == 0).all()
    assert got.loc[young, "model_why"].str.contains("card windows hold payments from").all()
    # a model whose feature the path cannot compute: model 0 for every payment, one sentence
    odd = tmp_path / "odd"
    odd.mkdir()
    spec = json.loads((tmp_path / "v1" / models.MODEL_JSON).read_text())
    spec["features"][0] = "u_not_a_stream_feature"
    (odd / models.MODEL_JSON).write_text(json.dumps(spec))
    _, _, text = realtime.serving_lines(3, 0.5, str(odd), tmp_path)
    (tmp_path / "odd.tsv").write_text(text)
    got = decide(spark, rows, seed_path(tmp_path), str(tmp_path / "odd.tsv"))
    assert (got["model_version"] == 0).all()
    assert got["model_why"].str.contains("cannot compute u_not_a_stream_feature").all()


def history_text(rows) -> dict:
    """Each card's event-time history as the stateful path keeps it after `rows` (History.java's
    card state, History.historyText): its last 60 days of payments, each with its over-the-mean
    flag (amount over 2.5x its own 30-day past mean), from their definitions."""
    by_card: dict = {}
    for r in rows:
        t, a = r[6], r[3]
        past = [(u, v) for u, v, _ in by_card.get(r[1], []) if t - PAST_DAYS[0] * DAY < u <= t]
        n, s = len(past), sum(v for _, v in past)
        by_card.setdefault(r[1], []).append((t, a, 1 if n and 2 * a * n > 5 * s else 0))
    out = {}
    for card, h in by_card.items():
        kept = [x for x in h if x[0] > h[-1][0] - max(PAST_DAYS) * DAY]
        out[card] = ";".join(",".join(str(x[k]) for x in kept) for k in range(3))
    return out


def test_after_a_restart_the_model_decides_from_the_first_payment_with_the_seeded_history(spark, tmp_path):
    """Issue 35 item 2: a real-time start seeds each card's 60-day history (the stateful path's,
    written with its profiles) and since when it is whole, so the model serves the card windows
    from the first payment after the start, equal to MLlib on the windows over the whole history."""
    fitted = train.fit(spark, next(e for k, _, e in train.candidates() if k == "logistic-regression"),
                       training_frame(2_000, 4), FEATURES)
    rows = payments(n_cards=4, per_card=12, seed_=8)
    cut = len(rows) // 2
    before, after = rows[:cut], rows[cut:]
    terminals = {"term-0": (rows[-1][6], [0.3] * len(TERMINALS))}
    serving = publish(tmp_path, 1, fitted, terminals, 100 * DAY, realtime.EVER)
    histories = history_text(before)
    snap = seed.Snapshot(as_of=T0, ends={0: cut},
                         profiles=[(c, None, None, None, None, None, "", h) for c, h in histories.items()])
    scope = f"test-{uuid.uuid4().hex[:8]}"
    plan = seed.Plan(starts={0: cut}, folds={0: cut}, holes={})
    seed_file = str(seed.write(tmp_path / f"{scope}.tsv", seed.seed_lines(
        scope, snap, plan, DEFAULT_LIMITS, 86_400_000, 1, history_from=seed.history_from(snap, realtime.EVER))))
    got = decide(spark, after, seed_file, serving)
    assert (got["model_version"] == 1).all() and got["model_why"].isna().all()
    frame = card_windows(rows).iloc[cut:].reset_index(drop=True)  # the windows over every payment
    assert frame["c_count_30d"].iloc[0] >= 2 and frame["c_amount_z_60d"].abs().max() > 1
    frame["amount"] = [r[3] / 100.0 for r in after]
    ts = pd.to_datetime([r[6] for r in after], unit="ms")
    frame["is_weekend"] = ts.dayofweek.isin([5, 6]).astype(float)
    frame["is_night"] = (ts.hour <= 6).astype(float)
    empty = [realtime.empty_terminal(n) for n in TERMINALS]
    for k, n in enumerate(TERMINALS):
        frame[n] = [terminals[r[2]][1][k] if r[2] in terminals else empty[k] for r in after]
    for n in ("score_avg_ticket", "score_proximity", "score_velocity"):
        frame[n] = got[n].to_numpy()
    np.testing.assert_allclose(got["score"].to_numpy(), train.score(spark, fitted, frame, FEATURES), rtol=0, atol=1e-9)
    # what the dashboard's seed writes to decisions-rt (tests/harness/dashboard_seed.rt_decision) has
    # the path's own shape, by the model and by the rules: the same fields, of the same types
    from pyspark.sql import functions as F

    from tests.harness.append_times import transaction_doc
    from tests.harness.dashboard_seed import RT_UNPUBLISHED, rt_decision

    (tmp_path / "partial").mkdir()
    partial = publish(tmp_path / "partial", 1, fitted, terminals, 100 * DAY)  # not complete: absent ones wait
    df = spark.createDataFrame(spark.sparkContext.parallelize(after, 1), DDL)
    df = df.select("*", F.timestamp_millis("ts_ms").alias("kafka_ts"))
    started = seed.write(tmp_path / f"{scope}-again.tsv", seed.seed_lines(  # a start writes its cut: the ages are known
        f"{scope}-again", seed.Snapshot(), seed.Plan({0: 0}, {0: 0}, {}), DEFAULT_LIMITS, 86_400_000, 1, now=T0))
    written = [json.loads(r[0]) for r in realtime.decisions(df, str(started), None, 0.7, 60_000, partial)
               .select(F.to_json(F.struct(*realtime.RT_DECISION_FIELDS))).collect()]
    real = {bool(d["model_version"]): {k: type(v) for k, v in d.items()} for d in written}
    seeded = {fallback: {k: type(v) for k, v in rt_decision(transaction_doc(f"tx-0-{9 if fallback else 1}", T0), 1,
                                                             T0 + 5, 2, 0.4).items()}
              for fallback in (True, False)}
    assert transaction_doc("tx-0-9", T0)["merchant_id"] == RT_UNPUBLISHED
    assert set(real) == {True, False} and real[True] == seeded[False] and real[False] == seeded[True]
