"""Fit the score aggregator on the labelled feature log with Spark MLlib, and save a version:

    python -m pipelines.fraud.train --from DATE --to DATE [--delay-days 7] [--as-of DATE]

The feature log (topic `features`: every decision's features, as the fraud job computed them) is
joined with the labels (topic `labels`) that were known by `--as-of` — by default the end of the
training window plus the feedback delay, the moment the model would go live: a label is known at
its `known_at` (a replayed history's) or when it reached Kafka (live). Nothing later is read.

The model kind, its settings and the training window's length (the given window, or
LONG_WINDOW_DAYS ending on the same day) are chosen by measurement on a validation period before
the training window, as the fraud-detection handbook's chapter 5 does (`Protocol.validation`: the
same protocol shifted back by the delay and a test period): each candidate is fitted on the
validation training window of its length and scored on the same validation test period (the
given window's protocol, after the handbook's exclusions, so that every candidate is measured on
the same payments); the best average precision wins, is refitted on the training window of its
length, and its threshold is the score that maximised F1 on the validation period. The test
period is never looked at here.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from infra import logs
from infra.config import Settings, load
from infra.history import load_history
from pipelines.fraud import handbook, models
from pipelines.fraud.features import FEATURE_LOG_FIELDS
from pipelines.fraud.metrics import auc_roc, average_precision

LABEL_READ_SCHEMA = "txn_id string, is_fraud boolean, pattern string, known_at bigint"
LONG_WINDOW_DAYS = 28  # the other training-window length validation weighs (four weeks)


def candidates():
    """(kind, settings, estimator) to choose among: few, as the handbook's model selection."""
    from pyspark.ml.classification import GBTClassifier, LogisticRegression

    common = {"featuresCol": "m_features", "labelCol": "label", "predictionCol": "m_prediction"}

    def named(estimator):  # GBTClassifier's constructor takes no probability/raw columns: setters
        return estimator.setProbabilityCol("m_probability").setRawPredictionCol("m_raw")

    # a random forest (100 trees, depth 8) was measured below both on the handbook's validation
    # week (AP 0.593 against 0.664 and 0.566 on the baseline features) and is no longer tried.
    # The trees' settings, measured on that validation week (four weeks, bench/RESULTS.md#handbook):
    # bins fine enough for an amount's splits (the scenario of large amounts): at 100 trees AP 0.715
    # with 128 bins, 0.728 with 256 (32, MLlib's default, 0.701 at 60 trees); rising by 0.0005 a 10
    # trees at 100, so 100 (depth 6 with subsampling 0.8: 0.718 at 150 trees with 128 bins). With
    # t_days_since_first_fraud (2026-11-26, 256 bins): 100 x depth 5 0.734, 150 x depth 5 0.735,
    # minInstancesPerNode 20 0.733, subsampling 0.8 0.735, 200 x depth 4 0.737: the last
    gbt = {"maxIter": 200, "maxDepth": 4, "stepSize": 0.1, "maxBins": 256}
    return [
        ("logistic-regression", {"regParam": 1e-4}, named(LogisticRegression(**common, regParam=1e-4,
                                                                             standardization=True, maxIter=100))),
        ("gradient-boosted-trees", gbt, named(GBTClassifier(**common, **gbt, seed=7))),
    ]


def read_log(spark, s: Settings, features_topic: str, labels_topic: str, as_of_ms: int):
    """The feature log joined with the labels known by `as_of_ms`, as a pandas frame in the
    protocol's terms (handbook.py): txn_id, card_id, event_time (datetime), label, the features."""
    from pyspark.sql import functions as F

    from infra import kafka_client

    def topic(name):
        return (spark.read.format("kafka").options(**kafka_client.spark_options(s)).option("subscribe", name)
                .option("kafka.isolation.level", "read_committed").option("startingOffsets", "earliest")
                .option("endingOffsets", "latest").load())

    types = {"txn_id": "string", "card_id": "string", "merchant_id": "string", "amount_cents": "bigint",
             "event_time": "bigint", "is_fraud": "boolean", "model_version": "int"}
    schema = ", ".join(f"{f} {types.get(f, 'double')}" for f in (*FEATURE_LOG_FIELDS, "model_version"))
    feats = (topic(features_topic).select(F.from_json(F.col("value").cast("string"), schema).alias("r"))
             .select("r.*").dropDuplicates(["txn_id"]))
    labels = (topic(labels_topic)
              .select(F.from_json(F.col("value").cast("string"), LABEL_READ_SCHEMA).alias("l"),
                      F.unix_millis("timestamp").alias("appended_at"))
              .select("l.txn_id", F.col("l.is_fraud").alias("label_fraud"),
                      F.coalesce("l.known_at", "appended_at").alias("known_at"))
              .where(F.col("txn_id").isNotNull() & F.col("label_fraud").isNotNull()
                     & (F.col("known_at") <= F.lit(as_of_ms)))
              .dropDuplicates(["txn_id"]))
    joined = feats.join(labels, "txn_id").toPandas()
    joined["event_time"] = pd.to_datetime(joined["event_time"], unit="ms")
    joined["label"] = joined.pop("label_fraud").astype(int)
    joined["amount"] = joined["amount_cents"] / 100.0
    return joined


def fit(spark, estimator, frame: pd.DataFrame, features):
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import VectorAssembler

    assembler = VectorAssembler(inputCols=list(features), outputCol="m_features", handleInvalid="keep")
    checkpoint_dir(spark)
    # as many partitions as cores: Arrow slices a frame into 10,000-row partitions, and a tree
    # pays a task per partition for each of its levels (27 for four weeks: most of a fit's time)
    data = (spark.createDataFrame(frame[list(features) + ["label"]].astype(float))
            .coalesce(spark.sparkContext.defaultParallelism).cache())
    try:
        return Pipeline(stages=[assembler, estimator]).fit(data)
    finally:
        data.unpersist()


def checkpoint_dir(spark) -> None:
    """Give MLlib a checkpoint folder when the session has none: boosted trees then cut their
    RDD lineage every 10 trees (checkpointInterval). Without it 200 trees' lineage overflowed a
    task's stack on deserialization (StackOverflowError, 2026-11-26); the trees delete their
    checkpoints when fitted. The folder is under the run folder (`make clean` clears it), not a
    temporary one left behind by every run."""
    if spark.sparkContext.getCheckpointDir() is None:
        spark.sparkContext.setCheckpointDir(str(load().run_dir / "mllib-checkpoints"))


def score(spark, pipeline, frame: pd.DataFrame, features) -> np.ndarray:
    from pyspark.ml.functions import vector_to_array

    pdf = frame[list(features)].astype(float).reset_index(drop=True)
    pdf["_row"] = np.arange(len(pdf), dtype=np.int64)
    got = pipeline.transform(spark.createDataFrame(pdf)).select(
        "_row", vector_to_array("m_probability")[1].alias("p")).toPandas()
    return got.sort_values("_row")["p"].to_numpy(dtype=float)


def best_f1_threshold(y: np.ndarray, s: np.ndarray) -> float:
    """The score threshold with the highest F1 on (y, s): the job's is_fraud cut."""
    order = np.argsort(-s, kind="mergesort")
    ys, ss = y[order], s[order]
    tp = np.cumsum(ys)
    k = np.arange(1, len(ys) + 1)
    f1 = 2 * tp / (k + ys.sum())
    last = np.r_[ss[1:] != ss[:-1], True]  # a threshold takes every payment of equal score
    i = int(np.argmax(np.where(last, f1, -1)))
    return float(ss[i])


def select(spark, logged: pd.DataFrame, start: dt.date, end: dt.date, delay_days: int, features,
           progress=print) -> dict:
    """Choose the kind and the window length on the validation period and fit the winner on the
    training window of that length ending `end`: {best, tried, kind, params, pipeline, train_rows,
    fit_s, protocol (the chosen training window's), validation (the winner's), days}.
    `logged`: labelled rows in the protocol's terms (read_log, or handbook.with_features)."""
    days = (end - start).days + 1
    protocol = handbook.Protocol(start, days, delay_days, min(days, 7))
    validation = protocol.validation()
    lengths = sorted({days, max(days, LONG_WINDOW_DAYS)})
    v_test = handbook.test_frame(logged, validation)
    tried = []
    for length in lengths:
        v_train = handbook.train_frame(logged, ending_at_end(validation, length))
        if v_train["label"].sum() == 0 or v_test.empty:
            raise SystemExit(f"train: the validation period {ending_at_end(validation, length).describe()} has no "
                             f"labelled fraud or no payments in the feature log: replay or run further back first.")
        covered = (v_train["event_time"].min().date() - ending_at_end(validation, length).train.start).days
        if length != days and covered > 0:
            progress(f"train: the feature log starts {covered} days into the {length}-day validation window; "
                     f"that length is not tried")
            continue
        for kind, params, estimator in candidates():
            started = time.monotonic()
            pipeline = fit(spark, estimator, v_train, features)
            v_test = v_test.assign(score=score(spark, pipeline, v_test, features))
            figures = handbook.evaluate(v_test)
            tried.append({"kind": kind, "params": params, "window_days": length,
                          "fit_s": round(time.monotonic() - started, 1),
                          **{k: figures[k] for k in ("auc_roc", "average_precision", "card_precision_at_100")},
                          "threshold": best_f1_threshold(v_test["label"].to_numpy(), v_test["score"].to_numpy())})
            progress(f"train: validation {kind}, {length} days: AP {figures['average_precision']}, "
                     f"AUC {figures['auc_roc']}, CP@100 {figures['card_precision_at_100']} "
                     f"({tried[-1]['fit_s']} s)")
    best = max(tried, key=lambda t: t["average_precision"] or 0.0)
    kind, params, estimator = next(c for c in candidates() if c[0] == best["kind"])
    chosen = ending_at_end(protocol, best["window_days"])
    train_rows = handbook.train_frame(logged, chosen)
    started = time.monotonic()
    pipeline = fit(spark, estimator, train_rows, features)
    return {"best": best, "tried": tried, "kind": kind, "params": params, "pipeline": pipeline,
            "train_rows": train_rows, "fit_s": time.monotonic() - started, "protocol": chosen,
            "validation": ending_at_end(validation, best["window_days"]), "days": days}


def ending_at_end(p: handbook.Protocol, length: int) -> handbook.Protocol:
    """`p` with a training window of `length` days ending where p's ends."""
    return handbook.Protocol(p.train.end - dt.timedelta(days=length), length, p.delay_days, p.test_days)


def train(spark, s: Settings, start: dt.date, end: dt.date, delay_days: int, as_of: dt.datetime,
          features_topic: str, labels_topic: str, db, progress=print) -> dict:
    """Choose (kind and window length), fit and register a version; its `models` row."""
    t0 = time.monotonic()
    days = (end - start).days + 1
    as_of_ms = int(as_of.replace(tzinfo=dt.timezone.utc).timestamp() * 1000)
    logged = read_log(spark, s, features_topic, labels_topic, as_of_ms)
    progress(f"train: {len(logged):,} labelled decisions in the feature log (labels known by {as_of:%Y-%m-%d %H:%M} UTC), "
             f"read in {time.monotonic() - t0:.1f} s")
    features = models.MODEL_FEATURES
    chosen = select(spark, logged, start, end, delay_days, features, progress)
    row = save(db, models.models_dir(s.store_path.parent, s), chosen, features, end, as_of)
    progress(f"train: model {row['version']} ({row['kind']}, {row['params']}) fitted on {row['train_rows']:,} payments "
             f"in {row['fit_s']:.1f} s, threshold {row['threshold']:.4f}; {time.monotonic() - t0:.1f} s in all")
    return {**row, "wall_s": round(time.monotonic() - t0, 1)}


def save(db, folder: Path, chosen: dict, features, end: dt.date, as_of: dt.datetime) -> dict:
    """Register `select`'s choice as the next version in `db` and save it under `folder`/vN:
    the MLlib files and, beside them, model.json (what the JVM scores with: the real-time path's
    ModelScore.java). Its `models` row."""
    best, tried, kind, params, pipeline, train_rows, fit_s = (chosen[k] for k in (
        "best", "tried", "kind", "params", "pipeline", "train_rows", "fit_s"))
    explain = (models.linear_explain(pipeline, train_rows, features) if kind == "logistic-regression"
               else models.tree_explain(features))
    row = {"kind": kind, "params": json.dumps({**params, "window_days": best["window_days"]}), "features": json.dumps(list(features)),
           "train_from": str(chosen["protocol"].train.start), "train_to": str(end), "as_of": as_of.isoformat(),
           "threshold": best["threshold"],
           "validation": json.dumps({**chosen["validation"].describe(),
                                     "test_exclusions": f"as the {chosen['days']}-day window's", **best}),
           "candidates": json.dumps(tried), "train_rows": int(len(train_rows)),
           "train_frauds": int(train_rows["label"].sum()), "fit_s": round(fit_s, 1),
           "created_at": int(time.time() * 1000), "path": "", "explain": json.dumps(explain)}
    version, path = models.save_version(db, folder, row, pipeline, features, explain)
    return {**row, "version": version, "path": str(path)}


def offline(spark, path, protocol: handbook.Protocol, store: Path | None = None) -> dict:
    """The learned model offline (`--offline`): the stream's features (equal to the job's:
    tests/spark/test_history_features.py) computed in pandas, the kind and window length chosen on
    validation by `select` as `train` does, the test period scored after the exclusions. The
    analyzers' scores are not computed here, so the model sees the amount and STREAM_FEATURES
    only: a measure of the features on any week of a history, not of the job. `store`: register
    the chosen model there too (`save`: a version the job, the real-time path included, can
    serve; `bench latency --model STORE` does)."""
    from pipelines.fraud.features import STREAM_FEATURES

    started = time.monotonic()
    longest = max(protocol.train_days, LONG_WINDOW_DAYS)
    earliest = dataclasses.replace(protocol, train_start=protocol.train.end - dt.timedelta(days=longest)).validation()
    rows = handbook.history_frame(load_history(handbook.history_file(path), start=earliest.history_start, end=protocol.test.last))
    tx = handbook.with_features(rows, protocol.delay_days)
    features = (handbook.AMOUNT,) + STREAM_FEATURES
    chosen = select(spark, tx, protocol.train.start, protocol.train.end - dt.timedelta(days=1),
                    protocol.delay_days, features, progress=lambda m: print(m, file=sys.stderr, flush=True))
    test = handbook.test_frame(tx, protocol)
    test["score"] = score(spark, chosen["pipeline"], test, features)
    result = handbook.evaluate(test)
    result.update(model=f"{chosen['kind']} {chosen['params']}, {chosen['best']['window_days']} days (offline, MLlib)",
                  features=list(features), protocol=protocol.describe(), validation=chosen["best"],
                  candidates=chosen["tried"], train=str(chosen["protocol"].train),
                  fit_s=round(chosen["fit_s"], 1), wall_s=round(time.monotonic() - started, 1))
    if store is not None:
        from controlplane.store import connect

        db = connect(store)
        try:
            as_of = dt.datetime.combine(protocol.train.end + dt.timedelta(days=protocol.delay_days), dt.time())
            row = save(db, models.models_dir(Path(store).parent), chosen, features,
                       protocol.train.end - dt.timedelta(days=1), as_of)
        finally:
            db.conn.close()
        result.update(store=str(store), version=row["version"], path=row["path"])
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipelines.fraud.train", description=__doc__.splitlines()[0])
    p.add_argument("--from", dest="start", required=True, type=dt.date.fromisoformat, help="first training day (UTC)")
    p.add_argument("--to", dest="end", required=True, type=dt.date.fromisoformat, help="last training day (UTC)")
    p.add_argument("--delay-days", type=int, default=None, help="the feedback delay (LABEL_DELAY_DAYS)")
    p.add_argument("--as-of", type=dt.datetime.fromisoformat, default=None,
                   help="labels known by then (default: the day after --to plus the delay)")
    p.add_argument("--offline", metavar="HISTORY", default=None,
                   help="register nothing: choose and fit on this history file's features computed offline "
                        "(handbook.with_features, the stream's), score the test period of the protocol the "
                        "window starts (the delay, then a week), print its figures as one JSON line")
    p.add_argument("--store", type=Path, default=None,
                   help="with --offline: register the chosen model in this store (a new one is made), its "
                        "files in a models folder beside it, for `bench latency --model STORE`")
    p.add_argument("--features-topic", default=None)
    p.add_argument("--labels-topic", default=None)
    a = p.parse_args(argv)
    if a.end < a.start:
        p.error("--to is before --from")
    if a.store is not None and not a.offline:
        p.error("--store goes with --offline (train registers in STORE_PATH's store)")
    logs.setup()
    s = load()
    delay = s.label_delay_days if a.delay_days is None else a.delay_days
    as_of = a.as_of or dt.datetime.combine(a.end + dt.timedelta(days=1 + delay), dt.time())
    from controlplane.store import connect
    from pipelines.engine.session import get_spark

    spark = get_spark("cardstream-train", s)
    if a.offline:
        days = (a.end - a.start).days + 1
        result = offline(spark, a.offline, handbook.Protocol(a.start, days, delay, min(days, 7)), a.store)
        print(json.dumps(result, default=str))
        return 0
    db = connect(s=s)
    row = train(spark, s, a.start, a.end, delay, as_of, a.features_topic or s.topics.features,
                a.labels_topic or s.topics.labels, db, progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps({k: row[k] for k in ("version", "kind", "params", "threshold", "train_rows", "train_frauds",
                                          "fit_s", "wall_s", "path")} | {"validation": json.loads(row["validation"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
