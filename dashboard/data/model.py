"""The Model page's data: the score aggregator's versions (the store's `models` table, as
`python -m pipelines.fraud.train` writes it), the one the fraud job decides with (`model_use`), how
each version did on the traffic labelled so far (the store's decisions joined with the labels the
dashboard reads from Kafka, `dashboard.data.kafka.recent_labels`), with the handbook's metrics
(`pipelines.fraud.metrics`, plain numpy), and what moved its flagged decisions' scores (each
decision's `explanation`). Nothing here asks Spark anything: what the store does not hold (a tree
ensemble's trees, in its MLlib folder) is not shown, and the page says so.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from dashboard.data.store import LEDGER_ROWS, frame, to_time
from pipelines.fraud.metrics import auc_roc, average_precision, card_precision_at_k, precision_recall_steps

JOB = "fraud"
RULES = 0
# the validation figures train.py records, in the order the page shows them
METRICS = {"auc_roc": "AUC ROC", "average_precision": "average precision", "card_precision_at_100": "card precision@100"}
SCORES = {"score_avg_ticket": "average ticket", "score_proximity": "proximity", "score_velocity": "velocity",
          "score": "the decision's score"}
TOP_K = 100
CURVE_POINTS = 400      # points per precision-recall curve drawn (the steps are thinned, ends kept)
IN_CHUNK = 900          # txn_ids per SQL IN (...): under SQLite's bound on parameters


def _json(text, default):
    if text in (None, ""):
        return default
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return default


def name(version: int, kind: str | None) -> str:
    return "rules (model 0)" if int(version) == RULES else f"model {int(version)} · {kind}"


def versions(db, limit: int = 20) -> pd.DataFrame:
    """The newest `limit` versions, oldest first: version, kind, params and features (parsed), the
    training window, the labels' cut (`as_of`), the threshold, the validation period and its figures
    (METRICS), the candidates tried (parsed), rows and frauds trained on, fit seconds, created."""
    df = frame(db, "SELECT * FROM (SELECT version, kind, params, features, train_from, train_to, as_of, threshold, "
                   "validation, candidates, path, train_rows, train_frauds, fit_s, created_at, explain FROM models "
                   "ORDER BY version DESC LIMIT ?) ORDER BY version", [limit])
    df["params"] = [_json(v, {}) for v in df["params"]]
    df["features"] = [_json(v, []) for v in df["features"]]
    df["candidates"] = [_json(v, []) for v in df["candidates"]]
    df["explain"] = [_json(v, None) for v in df["explain"]]
    validation = [_json(v, {}) for v in df["validation"]]
    for key in METRICS:
        df[key] = pd.to_numeric(pd.Series([v.get(key) for v in validation], index=df.index, dtype=object),
                                errors="coerce")
    df["validation_train"] = [v.get("train") for v in validation]
    df["validation_test"] = [v.get("test") for v in validation]
    df["name"] = [name(v, k) for v, k in zip(df["version"], df["kind"])]
    df["created"] = to_time(df["created_at"])
    return df.drop(columns=["validation"])


def candidates(models: pd.DataFrame) -> pd.DataFrame:
    """Every candidate kind each version's training tried on its validation period, long: version,
    name, kind (with its training window's length when it tried several), chosen (the candidate it
    refitted), metric, label, value (None where undefined)."""
    rows = []
    for m in models.itertuples():
        window = (m.params or {}).get("window_days") if isinstance(m.params, dict) else None
        for c in m.candidates:
            kind = c.get("kind") + (f", {c['window_days']} days" if c.get("window_days") else "")
            chosen = c.get("kind") == m.kind and c.get("window_days") in (None, window)
            for key, label in METRICS.items():
                rows.append({"version": m.version, "name": m.name, "kind": kind,
                             "chosen": chosen, "metric": key, "label": label, "value": c.get(key)})
    out = pd.DataFrame(rows, columns=["version", "name", "kind", "chosen", "metric", "label", "value"])
    out["value"] = pd.to_numeric(out["value"], errors="coerce")
    return out


def in_use(db, job: str = JOB) -> dict | None:
    """{version, why, since, epoch, chosen} the job recorded at its start (or its last use-model
    switch; `chosen`: the version that switch chose, which its starts serve again, or None); None
    before it has recorded any."""
    row = db.conn.execute("SELECT version, why, since, epoch, chosen FROM model_use WHERE job = ?", [job]).fetchone()
    if row is None:
        return None
    return {"version": int(row[0]), "why": row[1] or None, "since": row[2], "epoch": row[3],
            "chosen": None if row[4] is None else int(row[4])}


def decided_by(db, limit: int = LEDGER_ROWS) -> pd.DataFrame:
    """Decisions per model version among the newest `limit` in the store (0: the rules; a row the
    job wrote before decisions carried a version counts as the rules too)."""
    return frame(db, "SELECT coalesce(model_version, 0) AS version, COUNT(*) AS decisions, MIN(decided_at) AS first, "
                     "MAX(decided_at) AS last FROM (SELECT model_version, decided_at FROM decisions "
                     "ORDER BY decided_at DESC LIMIT ?) GROUP BY 1 ORDER BY 1", [limit])


def labelled(db, labels) -> pd.DataFrame:
    """The store's decisions of the labelled transactions: `labels` is [(txn_id, is_fraud 0/1)]
    (the labels known so far); out one row per decided one: txn_id, card_id, event_time, day,
    model_version, score, the analyzers' scores, is_fraud (the decision), label (the truth)."""
    truth = dict(labels)
    ids = list(truth)
    cols = "txn_id, card_id, event_time, coalesce(model_version, 0) AS model_version, score, " \
           + ", ".join(c for c in SCORES if c != "score") + ", is_fraud"
    parts = [frame(db, f"SELECT {cols} FROM decisions WHERE txn_id IN ({', '.join('?' * len(chunk))})", chunk)
             for chunk in (ids[i:i + IN_CHUNK] for i in range(0, len(ids), IN_CHUNK))]
    if not parts:
        parts = [frame(db, f"SELECT {cols} FROM decisions WHERE 0")]
    df = pd.concat(parts, ignore_index=True)
    df["label"] = df["txn_id"].map(truth).astype("int64")
    df["day"] = to_time(df["event_time"]).dt.normalize()
    return df.dropna(subset=["score"]).reset_index(drop=True)


def _thin(recall: np.ndarray, precision: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    if len(recall) <= points:
        return recall, precision
    keep = np.unique(np.r_[np.linspace(0, len(recall) - 1, points).round().astype(int), len(recall) - 1])
    return recall[keep], precision[keep]


def quality_by_version(df: pd.DataFrame, points: int = CURVE_POINTS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(curves, summary) per model version over the labelled decisions: the precision-recall steps
    of "score >= threshold" (model_version, name, recall, precision: thinned to `points`), and per
    version its decisions, frauds, average precision and AUC ROC (None where undefined: no fraud, or
    no genuine payment, among what it decided)."""
    curves, summary = [], []
    for version, part in df.groupby("model_version", sort=True):
        y, s = part["label"].to_numpy(), part["score"].to_numpy(dtype=float)
        frauds = int(y.sum())
        row = {"model_version": int(version), "decisions": len(part), "frauds": frauds,
               "average_precision": None, "auc_roc": None}
        if frauds:
            _, precision, recall = precision_recall_steps(y, s)
            recall, precision = _thin(recall, precision, points)
            curves.append(pd.DataFrame({"model_version": int(version), "recall": np.r_[0.0, recall],
                                        "precision": np.r_[precision[0], precision]}))
            row["average_precision"] = average_precision(y, s)
            if frauds < len(y):
                row["auc_roc"] = auc_roc(y, s)
        summary.append(row)
    curves = pd.concat(curves, ignore_index=True) if curves else pd.DataFrame(
        columns=["model_version", "recall", "precision"])
    return curves, pd.DataFrame(summary, columns=["model_version", "decisions", "frauds", "average_precision",
                                                  "auc_roc"])


def daily_card_precision(df: pd.DataFrame, k: int = TOP_K) -> pd.DataFrame:
    """The handbook's card precision@k per day of event time and model version over the labelled
    decisions (`pipelines.fraud.metrics.card_precision_at_k`: each day the k best-scored cards, a
    card found compromised on an earlier day left out): model_version, day, precision, cards (the
    day's cards), compromised (compromised cards still in play: the most the top k can find)."""
    rows = []
    for version, part in df.groupby("model_version", sort=True):
        cp = card_precision_at_k(part, k, day="day", card="card_id", score="score", label="label")
        cards = part.groupby("day")["card_id"].nunique()
        rows += [{"model_version": int(version), "day": d, "precision": p, "cards": int(cards.get(d, 0)),
                  "compromised": c} for d, p, c in zip(cp.days, cp.per_day, cp.compromised_cards)]
    return pd.DataFrame(rows, columns=["model_version", "day", "precision", "cards", "compromised"])


def separation(df: pd.DataFrame) -> pd.DataFrame:
    """How well each score the store holds separates the labelled traffic on its own: input (its
    name), auc_roc (None when a class is absent). The analyzers' three scores are inputs of every
    learned model; the event-time features are in the Kafka feature log, not in the store."""
    y = df["label"].to_numpy()
    out = []
    for column, label in SCORES.items():
        values = pd.to_numeric(df[column], errors="coerce")
        ok = values.notna().to_numpy()
        try:
            value = auc_roc(y[ok], values[ok].to_numpy(dtype=float))
        except ValueError:
            value = None
        out.append({"input": label, "column": column, "auc_roc": value})
    return pd.DataFrame(out, columns=["input", "column", "auc_roc"])


REASONS_ROWS = 2_000    # the newest flagged decisions whose explanations the page sums


def reasons(db, limit: int = REASONS_ROWS) -> pd.DataFrame:
    """What moved the scores of the newest `limit` flagged decisions, per model version, from each
    decision's `explanation` (its three largest contributions, {feature, value, share}: a logistic
    regression's coefficient x (value - training mean), the rules' analyzer scores): model_version,
    feature, in_top (decisions with it among their three), share (its mean share of the score's
    explanation over the version's explained flagged decisions, 0 where it is not among the three),
    explained (those decisions). A version whose decisions carry none (a tree ensemble's) is absent."""
    df = frame(db, "SELECT coalesce(model_version, 0) AS model_version, explanation FROM decisions "
                   "WHERE is_fraud = 1 ORDER BY decided_at DESC LIMIT ?", [limit])
    rows = []
    explained: dict[int, int] = {}
    for version, text in zip(df["model_version"], df["explanation"]):
        items = _json(text, None)
        if not items:
            continue
        explained[int(version)] = explained.get(int(version), 0) + 1
        rows += [(int(version), str(i.get("feature")), float(i.get("share") or 0.0)) for i in items
                 if isinstance(i, dict) and i.get("feature")]
    out = pd.DataFrame(rows, columns=["model_version", "feature", "share"])
    if out.empty:
        return pd.DataFrame(columns=["model_version", "feature", "in_top", "share", "explained"])
    out = out.groupby(["model_version", "feature"], as_index=False).agg(in_top=("share", "size"), share=("share", "sum"))
    out["explained"] = out["model_version"].map(explained)
    out["share"] = out["share"] / out["explained"]
    return out.sort_values(["model_version", "share"], ascending=[True, False]).reset_index(drop=True)
