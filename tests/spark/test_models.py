"""The learned score aggregator: fitting separates a planted pattern; a saved version is served with
its threshold and version; a missing or corrupt model falls back to the rules with one sentence."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from controlplane.store import connect
from pipelines.fraud import models, train
from pipelines.fraud.metrics import auc_roc

pytestmark = pytest.mark.spark


def planted(n: int, seed: int) -> pd.DataFrame:
    """Payments whose fraud is a pattern of two features (a risky terminal and a large amount), the
    other features noise."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({name: rng.random(n) for name in models.MODEL_FEATURES})
    frame["amount"] = rng.gamma(2.0, 40.0, n)
    risky = (frame["t_risk_7d"] > 0.8) & (frame["amount"] > 90)
    frame["label"] = (risky & (rng.random(n) < 0.9)).astype(int)
    return frame


@pytest.mark.parametrize("kind", ["gradient-boosted-trees"])  # the logistic regression: tests/spark/test_handbook_protocol.py
def test_a_fitted_model_separates_a_planted_pattern(spark, settings, kind):
    estimator = next(e for k, _, e in train.candidates() if k == kind)
    if kind == "gradient-boosted-trees":
        estimator.setMaxIter(20)  # the candidate's other settings; its 200 trees cost time, not separation
    fitted = train.fit(spark, estimator, planted(4_000, 1), models.MODEL_FEATURES)
    test = planted(2_000, 2)
    scores = train.score(spark, fitted, test, models.MODEL_FEATURES)
    assert auc_roc(test["label"].to_numpy(), scores) > 0.9
    assert test["label"].sum() > 20
    # the trees had a checkpoint folder to cut their lineage in (200 trees overflowed a stack without)
    folder = spark.sparkContext.getCheckpointDir()
    assert folder is not None and Path(folder.removeprefix("file:")).is_dir()
    assert Path(folder.removeprefix("file:")).parent == settings.run_dir / "mllib-checkpoints"  # not /tmp


def test_the_f1_threshold_takes_ties_together():
    y = np.array([1, 1, 0, 1, 0, 0])
    s = np.array([0.9, 0.8, 0.8, 0.5, 0.2, 0.1])
    # cutting at 0.8 flags three (two right), at 0.5 four (three right): F1 0.667 vs 0.857
    assert train.best_f1_threshold(y, s) == 0.5


def register(db, path: str, explain: dict | None = None) -> int:
    return models.register(db, {"explain": json.dumps(explain) if explain else None,"kind": "logistic-regression", "params": "{}",
                                "features": json.dumps(list(models.MODEL_FEATURES)), "train_from": "2018-07-25",
                                "train_to": "2018-07-31", "as_of": "2018-08-08T00:00:00", "threshold": 0.3,
                                "validation": "{}", "candidates": "[]", "path": path, "train_rows": 1,
                                "train_frauds": 1, "fit_s": 0.0, "created_at": 0})


def test_a_saved_version_is_served_with_its_threshold_and_number(spark, tmp_path):
    db = connect(tmp_path / "store.db")
    assert models.load(db) == models.Loaded(models.RULES)  # nothing trained yet: the rules, no complaint
    estimator = next(e for k, _, e in train.candidates() if k == "logistic-regression")
    fitted = train.fit(spark, estimator, planted(3_000, 3), models.MODEL_FEATURES)
    fitted.write().overwrite().save(str(tmp_path / "models" / "v1"))
    explain = models.linear_explain(fitted, planted(3_000, 3), models.MODEL_FEATURES)
    version = register(db, str(tmp_path / "models" / "v1"), explain)
    loaded = models.load(db)
    assert (loaded.version, loaded.threshold, loaded.why) == (version, 0.3, None)
    rows = planted(200, 4).assign(amount_cents=lambda f: (f["amount"] * 100).round().astype("int64")).drop(columns="amount")
    out = models.scored_columns(spark.createDataFrame(rows), loaded).toPandas()
    assert set(out["model_version"]) == {version}
    assert ((out["score"] >= 0.3) == out["is_fraud"]).all() and out["score"].between(0, 1).all()
    # every decision explained: its three largest contributions, coefficient x (value - mean)
    reasons = [json.loads(e) for e in out["explanation"]]
    assert all(len(r) == 3 and 0 < sum(x["share"] for x in r) <= 1.0001 for r in reasons)
    flagged = [r[0]["feature"] for r, f in zip(reasons, out["is_fraud"]) if f]
    assert flagged and all(name in ("t_risk_7d", "amount") for name in flagged)  # the planted pattern


def test_the_rules_explain_with_the_analyzers_scores(spark):
    frame = spark.createDataFrame([(0.9, 0.1, 0.0)], "score_avg_ticket double, score_proximity double, score_velocity double")
    got = json.loads(frame.select(models.rules_explanation().alias("e")).first()["e"])
    assert [x["feature"] for x in got] == ["score_avg_ticket", "score_proximity", "score_velocity"]
    assert [x["share"] for x in got] == [0.9, 0.1, 0.0]


def test_a_missing_or_corrupt_model_falls_back_to_the_rules_in_one_sentence(spark, tmp_path):
    db = connect(tmp_path / "store.db")
    register(db, str(tmp_path / "models" / "gone"))
    missing = models.load(db)
    assert missing.version == models.RULES and missing.pipeline is None
    assert "model 1 could not be loaded" in missing.why and "rules (model 0)" in missing.why and "\n" not in missing.why
    corrupt = tmp_path / "models" / "v2"
    (corrupt / "metadata").mkdir(parents=True)
    (corrupt / "metadata" / "part-00000").write_text("not a model")
    register(db, str(corrupt))
    broken = models.load(db)
    assert broken.version == models.RULES and "model 2 could not be loaded" in broken.why
    asked = models.load(db, 7)
    assert asked.version == models.RULES and "model 7 is not in the store" in asked.why
