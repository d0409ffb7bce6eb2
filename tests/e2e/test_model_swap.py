"""A model swap in a running fraud job (`use-model`): between two batches, no restart of the job,
no decision lost or made twice; decisions before it carry model 0 (the rules), after it the new
version; a version that cannot be loaded leaves the job deciding with what it had; the job's next
start serves the chosen version, not a newer one."""
from __future__ import annotations

import json
import signal
import time

import numpy as np
import pandas as pd
import pytest

from controlplane import commands, store
from pipelines.fraud import models, train
from tests.e2e.test_fraud_job import HOUR, Job, _wait_for, consume, produce, txn

pytestmark = pytest.mark.e2e


def a_model(spark, folder) -> str:
    """A small logistic regression over MODEL_FEATURES, saved as train.py saves one."""
    from pyspark.ml.classification import LogisticRegression

    rng = np.random.default_rng(5)
    frame = pd.DataFrame({name: rng.random(400) for name in models.MODEL_FEATURES})
    frame["amount"] = rng.gamma(2.0, 20.0, 400)
    frame["label"] = (frame["amount"] > 60).astype(int)
    lr = (LogisticRegression(featuresCol="m_features", labelCol="label", predictionCol="m_prediction", maxIter=10)
          .setProbabilityCol("m_probability").setRawPredictionCol("m_raw"))
    fitted = train.fit(spark, lr, frame, models.MODEL_FEATURES)
    fitted.write().overwrite().save(str(folder))
    return str(folder)


def register(db, path: str | None) -> int:
    return models.register(db, {"kind": "logistic-regression", "params": "{}",
                                "features": json.dumps(list(models.MODEL_FEATURES)), "train_from": "2018-07-25",
                                "train_to": "2018-07-31", "as_of": "2018-08-08T00:00:00", "threshold": 0.5,
                                "validation": "{}", "candidates": "[]", "path": path, "train_rows": 400,
                                "train_frauds": 1, "fit_s": 0.0, "created_at": 0})


def test_a_model_swap_under_load_loses_and_repeats_no_decision(spark, kafka, topic, tmp_path):
    job = Job(tmp_path, topic)
    db = store.connect(job.store_path)
    broken = register(db, str(tmp_path / "models" / "missing"))
    good = register(db, a_model(spark, tmp_path / "models" / "v2"))
    db["models"].delete(good)  # not there at start: the job starts on the rules (the newest, v1, fails)
    t0 = int(time.time() * 1000) - HOUR
    first = [txn(f"a-{i}", f"card-{i % 40}", t0 + i * 1_000) for i in range(600)]
    produce(kafka, job.tx, first)
    proc = job.start("--max-offsets-per-trigger", "100")
    try:
        _wait_for(lambda: job.count() >= 200, 240, "decisions by the rules")
        use = db["model_use"].get("fraud")
        assert use["version"] == models.RULES and f"model {broken} could not be loaded" in use["why"]
        register(db, a_model(spark, tmp_path / "models" / "v2"))  # trained while the job runs
        refused = commands.issue(db, "use-model", "fraud", version=broken)
        _wait_for(lambda: commands.get(db, refused)["status"] == commands.FAILED, 60, "the broken model refused")
        assert "stayed on model 0" in commands.get(db, refused)["result"]
        swap = commands.issue(db, "use-model", "fraud", version=good)
        later = [txn(f"b-{i}", f"card-{i % 40}", t0 + 700_000 + i * 1_000) for i in range(600)]
        produce(kafka, job.tx, later[:300])  # under load: the swap lands while batches keep coming
        _wait_for(lambda: commands.get(db, swap)["status"] == commands.DONE, 300, "the swap")
        assert "between two batches" in commands.get(db, swap)["result"]
        produce(kafka, job.tx, later[300:])
        _wait_for(lambda: job.count() == len(first) + len(later), 300, "every transaction decided")
        assert proc.poll() is None, "the job was not restarted"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
        print(out[-6000:])  # the job's log, shown when the test fails
    versions = {r["model_version"] for r in job.rows("SELECT DISTINCT model_version FROM decisions")}
    assert versions == {models.RULES, good}
    assert db["model_use"].get("fraud")["version"] == good
    on_kafka = consume(kafka, job.dec)
    assert sorted(d["txn_id"] for d in on_kafka) == sorted(t["txn_id"] for t in first + later)
    by_id = {d["txn_id"]: d for d in on_kafka}
    stored = {r["txn_id"]: r["model_version"] for r in job.rows("SELECT txn_id, model_version FROM decisions")}
    assert all(by_id[t]["model_version"] == v for t, v in stored.items()), "Kafka and the store agree"

    # the job's next start (a crash's restart, a standby's takeover) serves the version the switch
    # chose, not one trained since: a switch (a roll-back too) is never undone by a restart
    newer = register(db, str(tmp_path / "models" / "v2"))
    assert newer > good
    after = [txn(f"c-{i}", f"card-{i % 40}", t0 + 1_400_000 + i * 1_000) for i in range(40)]
    produce(kafka, job.tx, after)
    out = job.run_available_now()
    use = db["model_use"].get("fraud")
    assert (use["version"], use["chosen"], use["why"]) == (good, good, None), out[-3000:]
    restarted = job.rows("SELECT model_version FROM decisions WHERE txn_id LIKE 'c-%'")
    assert len(restarted) == len(after) and {r["model_version"] for r in restarted} == {good}
