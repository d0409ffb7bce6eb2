"""A fitted model exported for the JVM (models.export -> model.json -> ModelScore.java) gives the
same probability as MLlib's own transform, to 1e-9, for a logistic regression and for tree
ensembles; and the trees' Saabas explanation decomposes the score exactly."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from pyspark.ml.classification import GBTClassifier, LogisticRegression, RandomForestClassifier

from pipelines.fraud import models, train

pytestmark = pytest.mark.spark

FEATURES = ("amount", "t_risk_7d", "c_count_1d", "c_mean_7d", "is_night")


def planted(n: int, seed: int) -> pd.DataFrame:
    """Fraud is a risky terminal and a large amount; a few values missing (NaN, as the assembler
    passes them with handleInvalid=keep: a tree sends them right)."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({name: rng.random(n) for name in FEATURES})
    frame["amount"] = rng.gamma(2.0, 40.0, n)
    frame["is_night"] = (rng.random(n) < 0.3).astype(float)
    frame["label"] = (((frame["t_risk_7d"] > 0.7) & (frame["amount"] > 80)) | (rng.random(n) < 0.03)).astype(int)
    return frame


def estimators():
    common = {"featuresCol": "m_features", "labelCol": "label", "predictionCol": "m_prediction"}

    def named(e):
        return e.setProbabilityCol("m_probability").setRawPredictionCol("m_raw")

    return {"logistic-regression": named(LogisticRegression(**common, regParam=1e-3, standardization=True)),
            "random-forest": named(RandomForestClassifier(**common, numTrees=15, maxDepth=6, seed=3)),
            "gradient-boosted-trees": named(GBTClassifier(**common, maxIter=15, maxDepth=4, seed=3))}


def jvm_scores(spark, path: str, frame: pd.DataFrame) -> np.ndarray:
    """ModelScore's probability of each row, the values passed as their shortest exact text."""
    scorer = spark._jvm.cardstream.fraud.ModelScore
    return np.array([scorer.score(path, ",".join("" if np.isnan(v) else repr(float(v)) for v in row))
                     for row in frame[list(FEATURES)].to_numpy(dtype=float)])


@pytest.mark.parametrize("kind", ["logistic-regression", "random-forest", "gradient-boosted-trees"])
def test_the_jvm_and_mllib_give_the_same_probability(spark, tmp_path, kind):
    fitted = train.fit(spark, estimators()[kind], planted(3_000, 1), FEATURES)
    explain = models.linear_explain(fitted, planted(3_000, 1), FEATURES) if kind == "logistic-regression" else None
    path = models.write_export(fitted, FEATURES, tmp_path, explain)
    exported = json.loads(path.read_text())
    assert exported["features"] == list(FEATURES) and exported["format"] == 1
    test = planted(400, 2)
    test.loc[test.index[:40], "t_risk_7d"] = np.nan   # missing values: the same path in both
    mllib = train.score(spark, fitted, test, FEATURES)
    jvm = jvm_scores(spark, str(path), test)
    if kind == "logistic-regression":
        assert np.isnan(mllib[:40]).all() and np.isnan(jvm[:40]).all()
        mllib, jvm = mllib[40:], jvm[40:]
    assert not np.isnan(jvm).any() and len(np.unique(np.round(jvm, 6))) > 5  # a real spread of scores
    np.testing.assert_allclose(jvm, mllib, rtol=0, atol=1e-9)


def registered_trees(store_path, folder, features):
    """A tree version saved in `folder`, registered in a store at `store_path`, loaded as the job
    loads its newest version."""
    from controlplane.store import connect

    db = connect(store_path)
    models.register(db, {"explain": json.dumps(models.tree_explain(features)), "kind": "gradient-boosted-trees",
                         "params": "{}", "features": json.dumps(list(features)), "train_from": "2018-07-25",
                         "train_to": "2018-07-31", "as_of": "2018-08-08T00:00:00", "threshold": 0.5,
                         "validation": "{}", "candidates": "[]", "path": str(folder), "train_rows": 1,
                         "train_frauds": 1, "fit_s": 0.0, "created_at": 0})
    return models.load(db)


@pytest.mark.parametrize("kind", ["random-forest", "gradient-boosted-trees"])
def test_a_tree_ensembles_explanation_is_its_path_attribution(spark, tmp_path, kind):
    """Saabas: the contributions plus the root's value are the forest's mean class share (the
    boosted margin), so the planted features lead a flagged payment's explanation."""
    fitted = train.fit(spark, estimators()[kind], planted(3_000, 4), FEATURES)
    path = str(models.write_export(fitted, FEATURES, tmp_path))
    scorer = spark._jvm.cardstream.fraud.ModelScore.load(path)
    test = planted(300, 5)
    exported = json.loads((tmp_path / models.MODEL_JSON).read_text())
    weights, trees = exported["tree_weights"], exported["trees"]
    for row in test[list(FEATURES)].to_numpy(dtype=float)[:50]:
        x = spark.sparkContext._gateway.new_array(spark._jvm.double, len(row))
        for i, v in enumerate(row):
            x[i] = float(v)
        contributions = sum(scorer.contributions(x))
        p = scorer.probability(x)
        if kind == "random-forest":
            bias = sum(t["value"][0] for t in trees) / len(trees)
            assert abs(bias + contributions - p) < 1e-9
        else:
            bias = sum(w * t["value"][0] for w, t in zip(weights, trees))
            assert abs(1 / (1 + np.exp(-2 * (bias + contributions))) - p) < 1e-9
    risky = test[(test["t_risk_7d"] > 0.85) & (test["amount"] > 120)]
    assert len(risky) >= 3
    for row in risky[list(FEATURES)].to_numpy(dtype=float):
        reasons = json.loads(spark._jvm.cardstream.fraud.ModelScore.explain(path, ",".join(repr(float(v)) for v in row)))
        assert len(reasons) == 3 and 0 < sum(r["share"] for r in reasons) <= 1.0001
        assert {r["feature"] for r in reasons[:2]} == {"t_risk_7d", "amount"}


def test_the_stateful_path_explains_a_tree_ensembles_decisions(spark, tmp_path):
    """A GBT version served by the fraud job's plan (models.scored_columns: ModelScore.verdict in
    the JVM, not MLlib's transform) gives MLlib's probability to 1e-9 and carries its top three
    path attributions, ModelScore.explain's; the planted pattern's features lead the flagged
    payments'."""
    features = models.MODEL_FEATURES
    rng = np.random.default_rng(7)

    def frame(n):
        f = pd.DataFrame({name: rng.random(n) for name in features})
        f["amount"] = rng.gamma(2.0, 40.0, n)
        f["label"] = (((f["t_risk_7d"] > 0.8) & (f["amount"] > 90)) & (rng.random(n) < 0.9)).astype(int)
        return f

    fitted = train.fit(spark, estimators()["gradient-boosted-trees"], frame(4_000), features)
    folder = tmp_path / "models" / "v1"
    fitted.write().overwrite().save(str(folder))
    models.write_export(fitted, features, folder)
    loaded = registered_trees(tmp_path / "store.db", folder, features)
    assert models.jvm_verdict(loaded) == folder / models.MODEL_JSON
    test = frame(400).assign(amount_cents=lambda f: (f["amount"] * 100).round().astype("int64"))
    test.loc[test.index[:30], "t_risk_7d"] = np.nan   # missing: NaN in both, sent right by every split
    rows = test.drop(columns=["amount", "label"]).assign(row=range(len(test)))
    out = models.scored_columns(spark.createDataFrame(rows), loaded).toPandas().sort_values("row")
    ready = test.assign(amount=test["amount_cents"] / 100.0)
    np.testing.assert_allclose(out["score"].to_numpy(), train.score(spark, fitted, ready, features), rtol=0, atol=1e-9)
    assert ((out["score"] >= 0.5) == out["is_fraud"]).all() and set(out["model_version"]) == {1}
    scorer = spark._jvm.cardstream.fraud.ModelScore
    for _, r in out.iloc[20:40].iterrows():  # ten with a missing value, ten without
        x = [r["amount_cents"] / 100.0 if f == "amount" else r[f] for f in features]
        text = ",".join("" if pd.isna(v) else repr(float(v)) for v in x)
        assert r["explanation"] == scorer.explain(str(folder / models.MODEL_JSON), text)
    reasons = [json.loads(e) for e in out["explanation"]]
    assert all(len(r) == 3 and 0 < sum(x["share"] for x in r) <= 1.0001 for r in reasons)
    flagged = [r for r, f, row in zip(reasons, out["is_fraud"], out["row"]) if f and row >= 30]  # all known
    assert len(flagged) >= 5
    # a fit on noise finds a stray split or two (which ones moves with the feature list's length)
    assert all({"t_risk_7d", "amount"} & {x["feature"] for x in r[:2]} for r in flagged)
    assert sum({x["feature"] for x in r[:2]} == {"t_risk_7d", "amount"} for r in flagged) >= 0.9 * len(flagged)


def test_a_model_json_the_jvm_cannot_read_leaves_mllib_deciding(spark, tmp_path):
    """A tree version whose model.json is of another format: the plan is still built (no batch
    fails, no crash loop), MLlib's transform decides, and the decisions say nothing of a path."""
    features = models.MODEL_FEATURES
    rng = np.random.default_rng(11)
    frame = pd.DataFrame({name: rng.random(600) for name in features})
    frame["label"] = (frame["t_risk_7d"] > 0.7).astype(int)
    fitted = train.fit(spark, estimators()["gradient-boosted-trees"].setMaxIter(5), frame, features)
    folder = tmp_path / "models" / "v1"
    fitted.write().overwrite().save(str(folder))
    spec = models.export(fitted, features)
    (folder / models.MODEL_JSON).write_text(json.dumps({**spec, "format": 99}))
    loaded = registered_trees(tmp_path / "store.db", folder, features)
    assert models.jvm_verdict(loaded) == folder / models.MODEL_JSON  # looks servable, the JVM refuses it
    test = frame.head(50).assign(amount_cents=lambda f: (f["amount"] * 100).round().astype("int64"), row=range(50))
    out = models.scored_columns(spark.createDataFrame(test.drop(columns=["amount", "label"])), loaded).toPandas()
    out = out.sort_values("row")
    np.testing.assert_allclose(out["score"].to_numpy(), train.score(spark, fitted, test, features), rtol=0, atol=1e-12)
    assert out["explanation"].isna().all() and set(out["model_version"]) == {1}
