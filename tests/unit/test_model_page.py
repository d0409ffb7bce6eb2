"""The Model page and the Fraud page's headline quality (issue 35 items 5 and 6), on stores holding
only what the real system writes (tests/harness/dashboard_seed.py): versions as `python -m
pipelines.fraud.train` saves them, the fraud job's `model_use`, `bench handbook`'s and `bench
quality`'s runs recorded by their own `record`, decisions carrying the version that made them, and
the labels the simulator sent. The data module's figures against the handbook's metrics computed
here on the same rows; the pages under Streamlit's AppTest (the broker down: the labels are then
said to be unknown, never made up)."""
from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest

from controlplane.clock import now_ms
from controlplane.store import connect
from dashboard.data import model as data
from dashboard.data import quality
from dashboard.views import text
from pipelines.fraud.handbook import Protocol
from pipelines.fraud.metrics import auc_roc, average_precision
from pipelines.fraud.models import MODEL_FEATURES
from tests.harness.dashboard_seed import (HANDBOOK_FIGURES, MODEL_RUNS, NOW, seed_bench_runs, seed_models,
                                          seed_store, simulator_labels)
from tests.unit.test_dashboard_pages import assert_clean, dead_broker, db_path, open_page, plotly_count, text_of  # noqa: F401


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The crash scenario's five minutes, two versions trained, the job on model 2 for the last two."""
    db = connect(tmp_path_factory.mktemp("model") / "cardstream.db")
    seeded = seed_store(db, NOW)
    versions = seed_models(db, NOW)
    yield db, seeded, versions
    db.conn.close()


def test_versions_as_train_saves_them(trained):
    db, _, numbers = trained
    models = data.versions(db)
    assert list(models["version"]) == numbers == [1, 2]
    for m, (window, tried) in zip(models.itertuples(), MODEL_RUNS):
        best = max(tried, key=lambda t: t["average_precision"])  # train.py keeps the best average precision
        assert (m.kind, m.train_from, m.train_to) == (best["kind"], *window)
        assert (m.auc_roc, m.average_precision, m.card_precision_at_100) == (
            best["auc_roc"], best["average_precision"], best["card_precision_at_100"])
        assert m.features == list(MODEL_FEATURES) and m.params == best["params"]
        days = (dt.date.fromisoformat(window[1]) - dt.date.fromisoformat(window[0])).days + 1
        assert m.validation_test == str(Protocol(window[0], days, 7, 7).validation().test)
        assert m.path.endswith(f"models/v{m.version}") and m.name == f"model {m.version} · {m.kind}"
    cands = data.candidates(models)
    assert len(cands) == 2 * 3 * 3 and set(cands["metric"]) == set(data.METRICS)
    chosen = cands[cands["chosen"]].groupby("version")["kind"].unique()
    assert {v: list(k) for v, k in chosen.items()} == {1: ["random-forest"], 2: ["logistic-regression"]}
    # train.py saves a logistic regression's coefficients and training means, a tree ensemble's nothing
    assert models["explain"].iloc[0] is None and models["explain"].iloc[1]["features"] == list(MODEL_FEATURES)


def test_the_version_in_use_and_what_it_decided(trained):
    db, _, _ = trained
    use = data.in_use(db)
    assert (use["version"], use["why"], use["since"], use["epoch"]) == (2, None, NOW - 120_000, 2)
    decided = data.decided_by(db).set_index("version")["decisions"].to_dict()
    total = db.execute("SELECT COUNT(*) FROM decisions").fetchone()[0]
    late = db.execute("SELECT COUNT(*) FROM decisions WHERE decided_at >= ?", [NOW - 120_000]).fetchone()[0]
    assert decided == {0: total - late, 2: late}
    assert text.model_in_use(use, 2).startswith("The fraud job decides with model 2 since")
    assert use["chosen"] is None  # the seeded job started on the newest: nothing chosen
    assert "Model 3 is newer: the job loads the newest at its start" in text.model_in_use(use, 3)
    chosen = text.model_in_use({**use, "chosen": 2}, 3)  # after a use-model --version 2
    assert "A use-model chose model 2: the job serves it again after a restart" in chosen
    assert "Model 3 is newer: it stays on the chosen version" in chosen


def test_labelled_traffic_per_version_with_the_handbook_metrics(trained):
    db, seeded, _ = trained
    labels = simulator_labels(seeded)
    frame = data.labelled(db, labels)
    assert len(frame) == len(labels) and frame["label"].sum() == sum(f for _, f in labels)
    curves, summary = data.quality_by_version(frame)
    truth = dict(labels)
    for version, part in summary.set_index("model_version").iterrows():
        rows = db.execute("SELECT txn_id, score FROM decisions WHERE coalesce(model_version, 0) = ?",
                          [int(version)]).fetchall()
        y = np.array([truth[t] for t, _ in rows])
        s = np.array([score for _, score in rows])
        assert (part["decisions"], part["frauds"]) == (len(rows), y.sum())
        assert part["average_precision"] == pytest.approx(average_precision(y, s))
        assert part["auc_roc"] == pytest.approx(auc_roc(y, s))
        curve = curves[curves["model_version"] == version]
        assert len(curve) <= data.CURVE_POINTS + 2 and curve["recall"].iloc[-1] == 1.0
        assert curve["recall"].is_monotonic_increasing and curve["precision"].between(0, 1).all()
    daily = data.daily_card_precision(frame)
    # five minutes of one day, 97 cards, each with a fraud: the day's top 100 holds every one
    assert list(daily["model_version"]) == [0, 2] and list(daily["precision"]) == [0.97, 0.97]
    assert list(daily["cards"]) == [97, 97] and list(daily["compromised"]) == [97, 97]
    alone = data.separation(frame).set_index("column")["auc_roc"]
    assert set(alone.index) == set(data.SCORES) and alone.between(0.5, 1).all()


def test_what_moved_the_flagged_decisions_from_their_explanations(trained):
    db, _, _ = trained
    why = data.reasons(db)
    flagged = db.execute("SELECT coalesce(model_version, 0), explanation FROM decisions WHERE is_fraud = 1 "
                         "ORDER BY decided_at DESC LIMIT ?", [data.REASONS_ROWS]).fetchall()
    for version in (0, 2):
        mine = [json.loads(e) for v, e in flagged if v == version]
        part = why[why["model_version"] == version].set_index("feature")
        assert set(part["explained"]) == {len(mine)}
        for name, row in part.iterrows():  # the mean share over the version's flagged decisions, 0 when absent
            shares = [next((i["share"] for i in items if i["feature"] == name), 0.0) for items in mine]
            assert row["share"] == pytest.approx(sum(shares) / len(mine))
            assert row["in_top"] == sum(any(i["feature"] == name for i in items) for items in mine)
    # the rules' reasons are the analyzers' scores; the logistic regression's, its planted pattern
    assert set(why[why["model_version"] == 0]["feature"]) == {"score_avg_ticket", "score_proximity", "score_velocity"}
    assert why[why["model_version"] == 2]["feature"].iloc[:2].tolist() == ["amount", "t_risk_7d"]
    said = text.reasons(next(e for v, e in flagged if v == 2))
    assert said.startswith("amount 2,") and " · terminal risk over 7 days 0.31: " in said
    assert text.reasons(None) == "—" and text.feature("c_mean_30d") == "card's mean amount over 30 days"
    tree = text.not_measured({"version": 1, "kind": "random-forest", "explain": None, "path": "/x"})
    assert "model 1 is a random-forest, so its decisions carry no explanation" in tree
    old = text.not_measured({"version": 1, "kind": "logistic-regression", "explain": None, "path": "/x"})
    assert "model 1 was saved without its coefficients (a version trained before they were kept)" in old
    assert "carry no explanation" not in text.not_measured({"version": 2, "kind": "logistic-regression",
                                                             "explain": {"coefficients": [1.0]}})


def test_no_label_known_yet_and_no_decision():
    empty = data.labelled(connect(":memory:"), [])
    assert empty.empty and "label" in empty.columns
    curves, summary = data.quality_by_version(empty)
    assert curves.empty and summary.empty and data.daily_card_precision(empty).empty


def test_the_handbook_and_evaluation_runs_as_the_benches_record_them(trained):
    db, _, numbers = trained
    seed_bench_runs(db, numbers[-1])
    rows, run = quality.latest_handbook(db)
    assert list(rows["model"]) == ["rules (model 0)", f"logistic-regression (model {numbers[-1]})"]
    assert list(rows["model_version"]) == [0, numbers[-1]]
    for r, key in zip(rows.itertuples(), ("rules", "learned")):
        auc, ap, cp, per_day = HANDBOOK_FIGURES[key]
        assert (r.auc_roc, r.average_precision, r.card_precision_at_100, r.card_precision_per_day) == (auc, ap, cp, per_day)
    assert run["protocol"] == Protocol().describe() and run["run_id"] == "hb0001"
    said = text.handbook_run(run, rows)
    assert "tested on 2018-08-08..2018-08-14 (58,264 payments, 385 frauds" in said and text.HANDBOOK_BEST in said
    ev = quality.evaluation_headline(db)
    assert (ev["precision"], ev["recall"], ev["average_precision"], ev["seed"]) == (0.483, 0.151, 0.162, 20240614)


# --- the pages ------------------------------------------------------------------------------------

def seed_page(db_path, fallback=False, models=True, runs=False):
    db = connect(db_path)
    try:
        seeded = seed_store(db, now_ms())
        numbers = seed_models(db, seeded.now, fallback=fallback) if models else []
        if runs:
            seed_bench_runs(db, numbers[-1] if numbers else None)
        return numbers
    finally:
        db.conn.close()


def test_the_model_page_with_two_versions(db_path, dead_broker):  # noqa: F811
    seed_page(db_path)
    at = open_page("model")
    assert_clean(at, "model")
    shown = text_of(at)
    tiles = {m.label: m.value for m in at.metric}
    # model 2 decided the last 2 of the seeded 5 minutes: 4,800 of 12,000 decisions
    assert tiles == {"Deciding with": "model 2", "Newest version": "model 2", "Its share of decisions": "40.0 %"}
    # validation per candidate, training windows, the explanations (the labelled traffic needs Kafka)
    assert plotly_count(at) == 3
    figures = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    titles = [f["layout"]["title"]["text"] for f in figures]
    assert titles[0].startswith("Validation: each kind tried per version") and titles[1].startswith("Training windows")
    assert titles[2].startswith("What moved the flagged decisions' scores")
    assert {t["name"] for t in figures[2]["data"]} == {"rules (model 0)", "model 2 · logistic-regression"}
    bars = [t for t in figures[0]["data"] if t["type"] == "bar"]
    assert {t["name"] for t in bars} == {"logistic-regression", "random-forest", "gradient-boosted-trees"}
    assert "The fraud job decides with model 2 since" in shown
    assert "The traffic labelled so far is unknown: its labels live only in Kafka (`labels`) — broker down" in shown
    assert "Model 2's inputs, in the order it is fed them: `amount`, `is_weekend`" in shown
    assert "Each decision carries its three largest contributions (`explanation`)" in shown
    assert "each event-time feature's separation of the labelled traffic on its own is not measured here" in shown
    table = at.dataframe[0].value
    assert list(table["version"]) == [2, 1] and list(table["kind"]) == ["logistic-regression", "random-forest"]
    assert list(table["window"]) == ["2018-07-04 … 2018-07-31", "2018-07-25 … 2018-07-31"]
    assert not [w for w in at.warning if "could not be loaded" in w.value]


def test_a_model_that_could_not_be_loaded_is_one_sentence(db_path, dead_broker):  # noqa: F811
    seed_page(db_path, fallback=True)
    at = open_page("model")
    assert_clean(at, "model")
    assert {m.label: m.value for m in at.metric}["Deciding with"] == "rules"
    [said] = [w.value for w in at.warning if "could not be loaded" in w.value]
    assert said.startswith("Model 2 could not be loaded from ") and said.endswith(
        "; deciding with the rules (model 0).")
    assert "The fraud job decides with the rules (model 0) since" in text_of(at)


def test_no_model_yet_says_how_to_train_one(db_path, dead_broker):  # noqa: F811
    seed_page(db_path, models=False)
    at = open_page("model")
    assert_clean(at, "model")
    assert [i.value for i in at.info if i.value.startswith("No learned model")] == [text.NO_MODEL]
    assert text.NO_MODEL == ("No learned model yet: the rules decide (model 0). Train one with "
                             "`python -m pipelines.fraud.train --from DATE --to DATE`.")
    assert {m.label: m.value for m in at.metric}["Deciding with"] == "rules"


def test_the_fraud_page_headline_is_the_quality_on_unseen_data(db_path, dead_broker):  # noqa: F811
    seed_page(db_path, runs=True)
    at = open_page("fraud")
    assert_clean(at, "fraud")
    shown = text_of(at)
    subheaders = [h.value for h in at.subheader]
    assert subheaders[:2] == ["Quality on data the detector was not tuned on", "Live, on the simulator's own patterns"]
    metrics = [(m.label, m.value) for m in at.metric]
    auc, ap, cp, _ = HANDBOOK_FIGURES["learned"]
    rules = HANDBOOK_FIGURES["rules"]
    assert metrics[:9] == [("AUC ROC", f"{rules[0]:.3f}"), ("Average precision", f"{rules[1]:.3f}"),
                           ("Card precision@100", f"{rules[2]:.3f}"),
                           ("AUC ROC", f"{auc:.3f}"), ("Average precision", f"{ap:.3f}"),
                           ("Card precision@100", f"{cp:.3f}"),
                           ("Average precision", "0.162"), ("Precision", "48.3 %"), ("Recall", "15.1 %")]
    assert [m[0] for m in metrics[9:11]] == ["Live precision", "Live recall"]
    assert "**rules (model 0)**" in shown and "**logistic-regression (model 2)**" in shown
    recent = next(d.value for d in at.dataframe if "why" in d.value.columns)
    assert (recent["why"] != "—").all() and recent["why"].str.contains(r"^\D.* \d+ %").all()
    frauds = recent["amount"] > 2_000  # the seeded frauds: a spend spike at a risky terminal
    assert frauds.any() and recent.loc[frauds, "why"].str.contains(" · terminal risk over 7 days 0.31: ").all()
    assert set(recent["model_version"]) == {2}
    assert "tested on 2018-08-08..2018-08-14 (58,264 payments, 385 frauds" in shown
    assert "`bench quality` on " in shown and text.LIVE_IS_A_CHECK in shown
    assert "No handbook run yet" not in shown


def test_the_fraud_page_without_a_handbook_run_says_how_to_get_one(db_path, dead_broker):  # noqa: F811
    seed_page(db_path, models=False)
    at = open_page("fraud")
    assert_clean(at, "fraud")
    assert [i.value for i in at.info if "handbook" in i.value] == [text.NO_HANDBOOK_RUN]
    assert "`python -m bench handbook --json`" in text.NO_HANDBOOK_RUN
    assert any("run `python -m bench quality --json`" in i.value for i in at.info)
    assert [m.label for m in at.metric][:2] == ["Live precision", "Live recall"]
