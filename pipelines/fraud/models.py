"""The score aggregator's versions: model 0 is the rules (pipelines/fraud/aggregator.py), every
later version a Spark MLlib pipeline fitted on the feature log (`python -m pipelines.fraud.train`).

A version is a row of the store's `models` table (its features in order, its training window, the
labels it saw, its validation figures, its threshold) and a folder of MLlib files under
`models/v<N>` beside the store's file. The fraud job serves the version a `use-model` chose last (kept
across its restarts and a standby's takeover: `serving`), else the newest, in the JVM in its
streaming plan (a tree ensemble by ModelScore.verdict over its model.json, a logistic regression by
MLlib's transforms: `scored_columns`); when none exists or that version cannot be loaded,
it decides with the rules and says why in one sentence (`Loaded.why`), never crash-looping.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from infra import storage
from pipelines.fraud.features import MODEL_FEATURES  # noqa: F401 - the one list, named here too
RULES = 0
log = logging.getLogger("fraud")


@dataclass(frozen=True)
class Loaded:
    """The aggregator a job serves: a version, its MLlib pipeline (None for the rules), its
    threshold and features, and, when it fell back to the rules, why."""
    version: int
    pipeline: object | None = None
    threshold: float | None = None
    features: tuple[str, ...] = MODEL_FEATURES
    why: str | None = None
    explain: dict | None = None  # how its decisions are explained (see `explanation`)
    path: str | None = None      # its folder: the MLlib files and model.json (the JVM's export)


def models_dir(store_folder: Path, s=None):
    """Where versions are saved: beside the store; or beside the checkpoints when the settings `s`
    put those on a distributed file system (hdfs://), where every executor reads its model."""
    if s is not None and storage.is_remote(s.checkpoint_root):
        return s.checkpoint_root.with_name("models")
    return Path(store_folder) / "models"


def export_path(folder: str | Path):
    """A version folder's model.json: a Path, or a URI (a string) for a folder on hdfs://."""
    return storage.join(str(folder), MODEL_JSON) if "://" in str(folder) else Path(folder) / MODEL_JSON


def export_text(path) -> str | None:
    """model.json's text, None when absent: a local file read here, a URI through the driver's JVM
    (ModelScore.text, Hadoop's FileSystem: the same read as the executors')."""
    if "://" not in str(path):
        try:
            return Path(path).read_text()
        except OSError:
            return None
    from pyspark.sql import SparkSession  # deferred: only a driver reads a model on hdfs://

    spark = SparkSession.getActiveSession()
    try:
        return spark._jvm.cardstream.fraud.ModelScore.text(str(path)) if spark else None
    except Exception:  # noqa: BLE001 - py4j's error for an unreadable file: no export
        return None


def register(db, row: dict) -> int:
    """Add a version (the next number) to the `models` table; its number."""
    with db.conn:
        version = (db.execute("SELECT coalesce(max(version), 0) FROM models").fetchone()[0] or 0) + 1
        db["models"].insert({**row, "version": version})
    return version


def save_version(db, folder: Path, row: dict, pipeline, features, explain: dict | None) -> tuple[int, Path]:
    """Register `row` as the next version and save its fitted `pipeline` under `folder`/vN: the
    MLlib files and, beside them, model.json (what the JVM scores with); (its number, its folder)."""
    version = register(db, {**row, "path": ""})
    path = folder / f"v{version}"  # a Path, or a Location (models_dir)
    pipeline.write().overwrite().save(str(path))
    write_export(pipeline, features, path, explain)
    with db.conn:
        db.execute("UPDATE models SET path = ? WHERE version = ?", [str(path), version])
    return version, path


def versions(db) -> list[dict]:
    return [dict(r) for r in db.query("SELECT * FROM models ORDER BY version")]


def newest(db) -> dict | None:
    """The newest version whose files are saved (`save_version` registers a version, path empty,
    before it writes them: a job starting or a standby looking meanwhile must not load half a model)."""
    rows = list(db.query("SELECT * FROM models WHERE path != '' ORDER BY version DESC LIMIT 1"))
    return dict(rows[0]) if rows else None


def _row(db, version: int | None) -> dict | None:
    """The `models` row of `version` (None: the newest), or None when there is none."""
    if version is None:
        return newest(db)
    rows = list(db.query("SELECT * FROM models WHERE version = ?", [version]))
    return dict(rows[0]) if rows else None


def load(db, version: int | None = None) -> Loaded:
    """The version asked for (default: the newest), or the rules with the reason it could not be."""
    row = _row(db, version)
    if row is None:
        if version is None:
            return Loaded(RULES)
        return Loaded(RULES, why=f"model {version} is not in the store; deciding with the rules (model 0)")
    from pyspark.ml import PipelineModel  # deferred: a store without models needs no Spark

    try:
        pipeline = PipelineModel.load(row["path"])
    except Exception as exc:  # noqa: BLE001 - a missing or corrupt model must not stop decisions
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        return Loaded(RULES, why=f"model {row['version']} could not be loaded from {row['path']} ({first}); "
                                 f"deciding with the rules (model 0)")
    return Loaded(int(row["version"]), pipeline, float(row["threshold"]), tuple(json.loads(row["features"])),
                  explain=json.loads(row["explain"]) if row.get("explain") else None, path=row["path"])


def chosen(db, job: str) -> int | None:
    """The version the job's last successful `use-model` chose (0: the rules), or None when none
    has; `model_use.chosen`, which the job's start leaves as it is."""
    row = db.conn.execute("SELECT chosen FROM model_use WHERE job = ?", [job]).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def serving(db, job: str, ready: Loaded | None = None) -> Loaded:
    """What the job serves at its start: the version a `use-model` chose, so that a crash, a restart
    or a standby's takeover never undoes a switch (a roll-back to an older version, or to the
    rules, stays); when none was chosen, the newest. Either falls back to the rules with one
    sentence when its files cannot be loaded. `ready`: a version loaded before (a standby's, while
    it waited), served as it is when it is still that version, from the same folder."""
    version = chosen(db, job)
    if ready is not None and ready.why is None and (ready.version, ready.path) == _wanted(db, version):
        return ready
    if version is None:
        return load(db)
    if version == RULES:
        return Loaded(RULES)
    loaded = load(db, version)
    if loaded.why:  # its sentence names the version first: say that it was chosen
        why = loaded.why.replace(f"model {version} ", f"model {version} (chosen with use-model) ", 1)
        return dataclasses.replace(loaded, why=why)
    return loaded


def to_serve(db, job: str) -> tuple[int, str | None] | None:
    """(version, folder) the job's start would serve (`serving`), read from the store alone."""
    return _wanted(db, chosen(db, job))


def _wanted(db, version: int | None) -> tuple[int, str | None] | None:
    """(version, folder) `serving` would load for `version` (chosen, or None: the newest); None
    when that version is not in the store."""
    if version == RULES:
        return RULES, None
    row = _row(db, version)
    if row is None:
        return (RULES, None) if version is None else None
    return int(row["version"]), row["path"]


class Held:
    """The model a standby holds while it waits: loaded at its start and again whenever what the job
    would serve changes (the active's `use-model` switch, a newly trained version), so that its
    takeover serves at once rather than loading then. A version whose files fail to load is not
    tried again until the choice changes."""

    def __init__(self, db, job: str, load=serving):
        self.db, self.job, self._load = db, job, load
        self.wanted = to_serve(db, job)
        self.model: Loaded = load(db, job)

    def refresh(self) -> bool:
        """Load again when the choice changed since the last load; whether it did."""
        wanted = to_serve(self.db, self.job)
        if wanted == self.wanted:
            return False
        self.wanted, was = wanted, self.model.version
        self.model = self._load(self.db, self.job)
        log.info("standby: the job would now serve model %s (held: %s); loaded it%s", self.model.version, was,
                 f" ({self.model.why})" if self.model.why else "")
        return True


TOP_REASONS = 3


def linear_explain(pipeline, frame, features) -> dict:
    """What explains a logistic regression's decisions: its coefficients (on the features' own
    scale: MLlib returns them so with standardization) and the training means. A feature's
    contribution is coefficient x (value - training mean): how far it moved the log-odds from an
    average payment's, the exact decomposition of a linear model's score."""
    lr = pipeline.stages[-1]
    return {"method": "coefficient x (value - training mean)", "features": list(features),
            "coefficients": [float(v) for v in lr.coefficients.toArray()],
            "means": [float(frame[f].astype(float).mean()) for f in features]}


MODEL_JSON = "model.json"
PATH_ATTRIBUTION = "path attribution (Saabas)"


def tree_explain(features) -> dict:
    """What explains a tree ensemble's decisions: Saabas' path attribution, computed in the JVM
    from the version's model.json (ModelScore.contributions). Walking each tree from its root, a
    split moves the node's value (its training fraud share, or the boosted tree's prediction) by
    (child - parent), credited to the split's feature: exact for a single path (root value + the
    contributions = the forest's probability, or the boosted margin), one walk per tree, nothing
    but the tree needed. TreeSHAP's Shapley values would be fairer to correlated features, but
    cost a pass per leaf depth for each row; this one is cheap enough for every decision."""
    return {"method": PATH_ATTRIBUTION, "features": list(features)}


def export(pipeline, features, explain: dict | None = None) -> dict:
    """A fitted pipeline as the plain JSON the JVM scores with (ModelScore.java), written beside
    the MLlib files: the features in the assembler's order (a missing value is NaN, as MLlib's
    VectorAssembler with handleInvalid=keep passes it), and the classifier's parameters, or every
    tree with its splits, node values and the ensemble's combination rule (ModelScore.export)."""
    from pyspark.sql import SparkSession

    assembler, classifier = pipeline.stages[0], pipeline.stages[-1]
    if list(assembler.getInputCols()) != list(features):
        raise ValueError(f"the pipeline's assembler reads {assembler.getInputCols()}, not {list(features)}")
    jvm = SparkSession.getActiveSession()._jvm
    scoring = json.loads(jvm.cardstream.fraud.ModelScore.export(classifier._java_obj))
    if "logistic" in scoring:  # None: a version saved before its training means were kept (coefficient x value)
        scoring["logistic"]["means"] = (explain or {}).get("means")
    return {"format": 1, "kind": type(classifier).__name__, "features": list(features),
            "assembler": {"handleInvalid": assembler.getHandleInvalid()}, **scoring}


def write_export(pipeline, features, folder, explain: dict | None = None):
    """export() as `folder`/model.json, whole or not at all (`folder`: a Path or a Location)."""
    path = folder / MODEL_JSON
    storage.write_text(path, json.dumps(export(pipeline, features, explain)))
    return path


def explanation(contributions: dict, values: dict):
    """JSON of the TOP_REASONS largest contributions by size: [{feature, value, share}], `share`
    being the contribution's part of the sum of all their sizes (Spark SQL, in the JVM)."""
    from pyspark.sql import functions as F

    total = None
    for c in contributions.values():
        total = F.abs(c) if total is None else total + F.abs(c)
    items = F.array(*[F.struct(F.abs(c).alias("weight"), F.lit(name).alias("feature"),
                               values[name].cast("double").alias("value")) for name, c in contributions.items()])
    top = F.slice(F.sort_array(items, asc=False), 1, TOP_REASONS)
    return F.to_json(F.transform(top, lambda e: F.struct(
        e["feature"].alias("feature"), F.round(e["value"], 4).alias("value"),
        F.round(F.when(total > 0, e["weight"] / total).otherwise(F.lit(0.0)), 4).alias("share"))))


def rules_explanation():
    """The rules' reasons: the analyzers' scores, the largest first."""
    from pyspark.sql import functions as F

    scores = {f"score_{a}": F.coalesce(F.col(f"score_{a}"), F.lit(0.0)) for a in ("avg_ticket", "proximity", "velocity")}
    return explanation(scores, scores)


def jvm_verdict(loaded: Loaded):
    """The version's model.json when the stateful path scores with it in the JVM (ModelScore.verdict):
    a tree ensemble explained by path attribution, its assembler keeping missing values as NaN (as
    the JVM does). None: MLlib's transform (a logistic regression, or a version without the file)."""
    exported = export_path(loaded.path) if loaded.path else None
    text = export_text(exported) if exported and loaded.explain and loaded.explain.get("method") == PATH_ATTRIBUTION \
        else None
    if text is None:
        return None
    try:
        spec = json.loads(text)
    except ValueError:
        return None
    keeps = spec.get("assembler", {}).get("handleInvalid") == "keep"
    return exported if keeps and "trees" in spec and tuple(spec.get("features") or ()) == tuple(loaded.features) else None


def scored_columns(df, loaded: Loaded):
    """`df` (the scored transactions with their features) + `score`, `is_fraud`, `model_version`,
    `explanation` from the learned version, in the JVM: a tree ensemble through its model.json
    (ModelScore.verdict: its probability, MLlib's to 1e-9, and its path attribution in one call
    per row; MLlib's transform with a reflect call for the explanation cost a 300-row micro-batch
    about 100-150 ms more, 2026-11-26), otherwise MLlib's transforms (VectorAssembler and the
    classifier)."""
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    columns = df.columns
    ready = df if "amount" in columns else df.withColumn("amount", F.col("amount_cents") / F.lit(100.0))
    exported = jvm_verdict(loaded)
    verdict = None
    if exported is not None:
        from pyspark.sql.classic.column import Column

        try:
            verdict = Column(ready.sparkSession._jvm.cardstream.fraud.ModelScore.verdict(str(exported)))
        except Exception as exc:  # noqa: BLE001 - a model.json the JVM cannot read: MLlib's transform decides
            log.warning("model %s: %s cannot be read by the JVM (%s); scoring with MLlib's transform, unexplained",
                        loaded.version, exported, str(exc).strip().splitlines()[0][:200] if str(exc).strip() else exc)
    if verdict is not None:
        out = ready.select("*", verdict.alias("_verdict"))
        score = F.col("_verdict.score")
        return out.select(*[F.col(c) for c in columns], score.alias("score"),
                          (score >= F.lit(loaded.threshold)).alias("is_fraud"),
                          F.lit(loaded.version).alias("model_version"), F.col("_verdict.explanation").alias("explanation"))
    out = loaded.pipeline.transform(ready)
    score = vector_to_array(F.col("m_probability"))[1]
    why = F.lit(None).cast("string")  # a tree ensemble without its model.json: no path to attribute
    if loaded.explain and loaded.explain.get("coefficients"):
        e = loaded.explain
        values = {f: F.col(f).cast("double") for f in e["features"]}
        why = explanation({f: F.lit(w) * (values[f] - F.lit(m)) for f, w, m in
                           zip(e["features"], e["coefficients"], e["means"])}, values)
    return out.select(*[F.col(c) for c in columns], score.alias("score"),
                      (score >= F.lit(loaded.threshold)).alias("is_fraud"),
                      F.lit(loaded.version).alias("model_version"), why.alias("explanation"))


def main(argv: list[str] | None = None) -> int:
    """`python -m pipelines.fraud.models export [--store PATH] [--version N]`: write model.json for
    a version saved before train.py exported it (the real-time path serves only exported ones)."""
    import argparse

    from controlplane.store import connect
    from infra.config import load as settings
    from pipelines.engine.session import get_spark

    p = argparse.ArgumentParser(prog="python -m pipelines.fraud.models")
    p.add_argument("command", choices=("export",))
    p.add_argument("--store", type=Path, default=None, help="the store holding the version (default: STORE_PATH)")
    p.add_argument("--version", type=int, default=None, help="default: the newest")
    a = p.parse_args(argv)
    s = settings()
    db = connect(a.store or s.store_path)
    row = newest(db) if a.version is None else next(iter(db.query("SELECT * FROM models WHERE version = ?",
                                                                   [a.version])), None)
    if row is None:
        raise SystemExit(f"no model {a.version if a.version is not None else ''} in {a.store or s.store_path}")
    from pyspark.ml import PipelineModel

    get_spark("cardstream-model-export", s)
    explain = json.loads(row["explain"]) if row.get("explain") else None
    path = write_export(PipelineModel.load(row["path"]), json.loads(row["features"]),
                        storage.like(s.checkpoint_root, row["path"]), explain)
    print(json.dumps({"version": row["version"], "kind": row["kind"], "export": str(path)}))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
