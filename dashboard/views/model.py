"""Model: the score aggregator's versions (their training windows and validation figures, per
candidate kind), the one the fraud job decides with, and how each version did on the traffic
labelled so far (precision-recall, card precision@100 per day); what is not measured, said."""
import streamlit as st

from dashboard import charts, fmt, ui
from dashboard.data import kafka
from dashboard.data import model as data
from dashboard.views import text

st.title("Model")
st.caption("The fraud job's score aggregator: model 0 is the rules; each later version is a Spark MLlib pipeline "
           "that `python -m pipelines.fraud.train` fitted on the feature log and the labels known by its cut, its "
           "kind chosen on a validation period before its training window. Times are UTC.")


def draw(db, s):
    models = data.versions(db)
    use = data.in_use(db)
    newest = int(models["version"].max()) if not models.empty else None
    decided = data.decided_by(db)
    in_use(models, use, newest, decided)
    if models.empty:
        st.info(text.NO_MODEL, icon=":material/rule:")
    else:
        versions(models)
    names = {0: data.name(0, None), **dict(zip(models["version"].astype(int), models["name"]))}
    labelled = traffic(db, s, decided, names)
    matters(db, models, names, labelled)


def matters(db, models, names, labelled):
    """What moved the flagged decisions' scores (their explanations), how well each stored score
    separates the labelled traffic alone, the newest model's inputs; what is not measured, said."""
    st.subheader("What matters")
    why = data.reasons(db)
    if why.empty:
        ui.no_data("no flagged decision carries an explanation.")
    else:
        ui.chart(charts.reasons(why, names, text.feature), "model.reasons")
        per = why.groupby("model_version")["explained"].first()
        st.caption("Over the newest " + ", ".join(f"{fmt.count(n)} flagged decisions of {names.get(int(v), f'model {v}')}"
                                                  for v, n in per.items())
                   + ": each feature's share of a decision's explanation (its three largest contributions, their "
                     "sizes adding up to the whole), averaged; 0 where it was not among the three.")
    if labelled is not None and not labelled.empty:
        ui.chart(charts.separation(data.separation(labelled)), "model.separation")
    if not models.empty:
        last = models.iloc[-1]
        st.markdown(f"Model {int(last['version'])}'s inputs, in the order it is fed them: "
                    + ", ".join(f"`{f}`" for f in last["features"]) + ".")
    st.caption(text.not_measured(models.iloc[-1].to_dict() if not models.empty else None))


def in_use(models, use, newest, decided):
    st.subheader("In use")
    cols = st.columns(3)
    version = use["version"] if use else None
    cols[0].metric("Deciding with", fmt.NONE if version is None else ("rules" if version == 0 else f"model {version}"),
                   border=True, help="The aggregator the fraud job recorded at its start or its last use-model "
                                     "switch (`model_use`); model 0 is the rules.")
    cols[1].metric("Newest version", fmt.NONE if newest is None else f"model {newest}", border=True,
                   help="The newest version in the store's `models` table (the job loads the newest at its start "
                        "unless a use-model chose a version).")
    total = decided["decisions"].sum()
    mine = decided[decided["version"] == version]["decisions"].sum() if version is not None and total else None
    cols[2].metric("Its share of decisions", fmt.NONE if mine is None else fmt.percent(mine / total), border=True,
                   help=f"Of the newest {fmt.count(total)} decisions in the store (at most 100,000), the share the "
                        "version in use made.")
    st.markdown(text.model_in_use(use, newest))
    if use and use.get("why"):
        st.warning(use["why"][0].upper() + use["why"][1:] + ".", icon=":material/warning:")


def versions(models):
    st.subheader("Versions")
    ui.chart(charts.model_validation(data.candidates(models), data.METRICS), "model.validation")
    ui.chart(charts.training_windows(models), "model.training")
    table = models.assign(
        window=models["train_from"] + " … " + models["train_to"],
        params=[", ".join(f"{k} {v}" for k, v in p.items()) for p in models["params"]],
        trained_on=[f"{fmt.count(r)} payments, {fmt.count(f)} frauds" for r, f in
                    zip(models["train_rows"], models["train_frauds"])],
        threshold=[fmt.decimal(t, 4) for t in models["threshold"]],
        validated=[v or fmt.NONE for v in models["validation_test"]],
        fit=[fmt.duration_s(v) for v in models["fit_s"]])
    st.dataframe(table[["version", "kind", "params", "window", "trained_on", "validated", "threshold", "fit",
                        "created"]].iloc[::-1], hide_index=True, width="stretch",
                 column_config={"version": st.column_config.NumberColumn(format="%d"),
                                "window": st.column_config.TextColumn("training window"),
                                "trained_on": st.column_config.TextColumn("trained on"),
                                "validated": st.column_config.TextColumn(
                                    "validated on", help="The days its kind and threshold were chosen on: scored "
                                                         "after a fit on the days before them."),
                                "threshold": st.column_config.TextColumn(
                                    "threshold", help="The score from which it flags: best F1 on validation."),
                                "fit": st.column_config.TextColumn("fit"),
                                "created": st.column_config.DatetimeColumn("saved (UTC)", format="YYYY-MM-DD HH:mm")})


def traffic(db, s, decided, names):
    """The labelled decisions (None when they cannot be read), drawn as curves."""
    st.subheader("On the traffic labelled so far")
    if decided.empty:
        ui.no_data("no decision in the store, so no labelled traffic to measure a version on.")
        return None
    try:
        labels = ui.recent_labels(s.kafka_bootstrap, s.topics.labels)
    except kafka.BrokerDown as exc:
        st.warning(f"The traffic labelled so far is unknown: its labels live only in Kafka (`{s.topics.labels}`) — "
                   f"{exc}.", icon=":material/cloud_off:")
        return None
    labelled = data.labelled(db, labels)
    if labelled.empty:
        ui.no_data(f"no decided transaction among the newest {fmt.count(len(labels))} labels in "
                   f"`{s.topics.labels}`.")
        return labelled
    curves, summary = data.quality_by_version(labelled)
    daily = data.daily_card_precision(labelled)
    st.caption(text.labelled_traffic(len(labels), len(labelled), int(labelled["label"].sum()), s.topics.labels))
    left, right = st.columns(2)
    with left:
        if curves.empty:
            ui.no_data("no fraud among the labelled decisions, so no precision-recall curve.")
        else:
            ui.chart(charts.precision_recall(curves, names), "model.precision_recall")
    with right:
        ui.chart(charts.card_precision_days(daily, names, data.TOP_K), "model.card_precision")
    said = [f"{names.get(r.model_version, f'model {r.model_version}')}: average precision "
            f"{fmt.decimal(r.average_precision, 3)}, AUC ROC {fmt.decimal(r.auc_roc, 3)} over "
            f"{fmt.count(r.decisions)} decisions ({fmt.count(r.frauds)} frauds)" for r in summary.itertuples()]
    st.caption("; ".join(said) + ". Card precision@100: each day the 100 best-scored cards (a card's best "
                                 "score that day), the share of them compromised, a card found on an earlier day "
                                 "left out (the handbook's metric).")
    return labelled


ui.live(draw)
