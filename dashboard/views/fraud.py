"""Fraud: how good the detector is on data it was not tuned on (the benches' handbook and
evaluation-set runs, as the headline), the live figures on the simulator's own patterns (labelled as
the consistency check they are), the two paths (real-time and stateful) and what the real-time
guarantee just did; what the detector flagged and why (each analyzer's score)."""
import pandas as pd
import streamlit as st

from dashboard import charts, fmt, measured, ui
from dashboard.data import fraud as data
from dashboard.data import kafka, quality
from dashboard.data.store import now_ms, to_time
from dashboard.views import text

st.title("Fraud")
st.caption("Three analyzers score every transaction; the aggregator (the rules, or a learned model: see Model) "
           "combines them into one decision. Times are UTC.")


def draw(db, s):
    now = now_ms()
    headline(db)
    st.subheader("Live, on the simulator's own patterns")
    st.caption(text.LIVE_IS_A_CHECK)
    q = data.quality(db)
    cols = st.columns(4)
    audited = q["ts"] is not None
    why = "Empty: the auditor has not compared decisions with the labels yet."
    check = " On the simulator's own patterns: a consistency check, not the detector's quality."
    cols[0].metric("Live precision", fmt.percent(q["precision"]), border=True,
                   help="Flagged transactions that really are fraud (labels)." + check
                   if q["precision"] is not None else why)
    cols[1].metric("Live recall", fmt.percent(q["recall"]), border=True,
                   help="Fraudulent transactions (labels) that were flagged." + check
                   if q["recall"] is not None else why)
    cols[2].metric("Decided", fmt.count(q["decided"]), border=True, delta_arrow="off", delta_color="gray",
                   delta=None if q["truth"] is None else text.versus_truth(q["decided"], q["truth"]),
                   help="Decisions in the store up to the fraud job's committed batch, against the valid "
                        "transactions up to its committed offsets." if audited else why)
    cols[3].metric("Flagged", fmt.count(data.flagged_total(db)), border=True,
                   help="Decisions in the store flagged as fraud.")
    if audited:
        st.caption(text.fraud_job(q))
    else:
        ui.no_data("the auditor has not compared decisions with the labels yet.")
    paths(db, now)
    realtime(db, s)
    measured.draw(db)
    flagged = data.flagged(db, 50)
    if flagged.empty:
        ui.no_data("no transaction flagged as fraud.")
        return
    left, right = st.columns([2, 3])
    ui.chart(charts.scores(flagged), "fraud.scores", left)
    with right:
        series = data.quality_series(db, now)
        if series.empty:
            ui.no_data("no precision or recall measured in the last 30 minutes.")
        else:
            ui.chart(charts.quality(series), "fraud.quality")
    st.subheader("Recently flagged (the stateful path)")
    flagged = flagged.assign(why=[text.reasons(e) for e in flagged["explanation"]])
    st.dataframe(flagged[["decided", "txn_id", "card_id", "amount", "why", *data.SCORE_COLUMNS, "score",
                          "model_version", "latency_ms"]],
                 hide_index=True, width="stretch", height=380,
                 column_config={"decided": st.column_config.DatetimeColumn("decided (UTC)", format="HH:mm:ss"),
                                "why": st.column_config.TextColumn(
                                    "why: its three largest reasons", width="large",
                                    help="Each reason's share of the score's explanation: a logistic regression's "
                                         "coefficient × (value − training mean), a tree ensemble's path attribution "
                                         "(Saabas), the rules' analyzer scores."),
                                "model_version": st.column_config.NumberColumn(
                                    "model", format="%d", help="The aggregator that decided: 0 the rules, N a "
                                                               "learned version (see Model)."),
                                "amount": st.column_config.NumberColumn(format="localized"),
                                "latency_ms": st.column_config.NumberColumn(
                                    "decided − produced", format="%d ms",
                                    help="decided_at − produced_at: the job's clock when it scored minus the "
                                         "producer's when it sent (two clocks, before the store and Kafka writes); "
                                         "the Overview's latency is the bench's, Kafka append to append."),
                                **{c: st.column_config.ProgressColumn(c.removeprefix("score_").replace("_", " "),
                                                                      min_value=0, max_value=1, format="%.2f")
                                   for c in [*data.SCORE_COLUMNS, "score"]}})


WHY_HELP = ("Each reason's share of the score's explanation: a logistic regression's coefficient × (value − training "
            "mean), a tree ensemble's path attribution (Saabas), the rules' analyzer scores.")


def realtime(db, s):
    """The real-time path's decisions (in Kafka only): who made them, counted from the newest ones
    (the model in use, or the rules with the one-sentence reason), and the ones it flagged, each
    with its reasons in words and, when the rules decided although a model was in use, why."""
    if data.rt_runs(db, 1).empty:
        return  # the Overview says it: the job has not run in real-time mode
    topic = s.topics.decisions_rt
    st.subheader("Real-time path: who decided, and why")
    try:
        df = data.rt_frame(ui.rt_decisions(s.kafka_bootstrap, topic))
    except kafka.BrokerDown as exc:
        st.warning(f"The real-time decisions are unknown: they live only in Kafka (`{topic}`) — {exc}.",
                   icon=":material/cloud_off:")
        return
    if df.empty:
        ui.no_data(f"no decision in `{topic}` yet.")
        return
    st.markdown(text.rt_deciders(data.rt_deciders(df), topic))
    flagged = df[df["is_fraud"]].head(50)
    if flagged.empty:
        ui.no_data(f"none of the newest {fmt.count(len(df))} real-time decisions flagged a transaction.")
        return
    flagged = flagged.assign(why=[text.reasons(e) for e in flagged["explanation"]],
                             decided_by=[f"model {v}" if v > 0 else "rules (model 0)" for v in flagged["model_version"]],
                             rules_because=[w if isinstance(w, str) and w else fmt.NONE for w in flagged["model_why"]])
    fell_back = (flagged["rules_because"] != fmt.NONE).any()  # the column only when a sentence is there to read
    st.dataframe(flagged[["decided", "txn_id", "card_id", "amount", "score", "decided_by",
                          *(["rules_because"] if fell_back else []), "why"]],
                 hide_index=True, width="stretch", height=300,
                 column_config={"decided": st.column_config.DatetimeColumn("decided (UTC)", format="HH:mm:ss"),
                                "why": st.column_config.TextColumn("why: its three largest reasons", width="large",
                                                                   help=WHY_HELP),
                                "decided_by": st.column_config.TextColumn(
                                    "decided by", help="The aggregator that decided on the real-time path."),
                                "rules_because": st.column_config.TextColumn(
                                    "the rules, because", width="medium",
                                    help="Why the rules decided although a model was in use (the real-time path "
                                         "could not serve one of its features), in one sentence."),
                                "amount": st.column_config.NumberColumn(format="localized"),
                                "score": st.column_config.ProgressColumn("score", min_value=0, max_value=1,
                                                                         format="%.2f")})


def paths(db, now):
    """Per path: decided, undecided and latency, the faults marked, and one sentence on what the
    real-time guarantee just did (all from the live auditor's figures)."""
    st.subheader("Two paths: fast at most or at least once, accurate exactly once")
    series = data.paths_series(db, now)
    totals = data.paths_totals(series)
    runs = data.rt_runs(db, 1)
    guarantee = runs["guarantee"].iloc[0] if not runs.empty else None
    gaps = data.rt_gaps(db, now)
    st.markdown(text.rt_guarantee_story(gaps[0] if gaps else None, totals, guarantee))
    # a row per path, its name beside three tiles with short labels: six tiles in one row cut their
    # labels ("Real-time: d…", issue 36 item 7)
    for path in data.PATHS:
        t = totals.get(path)
        what = f"`decisions-rt`, {guarantee or 'its guarantee unknown'}" if path == "real-time" else \
            "`decisions`, exactly once"
        cols = st.columns([1.4, 1, 1, 1], vertical_alignment="center")
        cols[0].markdown(f"**{path.capitalize()} path**  \n{what}")
        cols[1].metric("Decided", fmt.count(t["decided"]) if t else fmt.NONE, border=True,
                       help=f"Distinct transactions of the last 30 minutes the {path} path decided.")
        cols[2].metric("Undecided", fmt.count(t["undecided"]) if t else fmt.NONE,
                       border=True, help=f"Transactions the {path} path had not decided "
                                         f"{fmt.decimal(ui.settings().fraud_undecided_after_seconds)} s "
                                         "after they arrived (FRAUD_UNDECIDED_AFTER_SECONDS).")
        cols[3].metric("Latency p99", fmt.duration_ms(t["p99_ms"]) if t else fmt.NONE,
                       border=True, help=f"The {path} path's latency p99 over the newest settled "
                                         f"{fmt.decimal(ui.settings().audit_interval_seconds)} s of arrivals: "
                                         "the decision's Kafka append time minus the transaction's.")
    fast = totals.get("real-time") or {}
    st.markdown(text.confirmed_alerts(fast.get("alerts"), fast.get("confirmed")))
    if series.empty:
        ui.no_data("the auditor has not compared the paths yet.")
        return
    ui.chart(charts.fraud_paths(series, data.rt_fault_marks(db, now), ui.settings().audit_interval_seconds),
             "fraud.paths")
    if gaps:
        table = pd.DataFrame(gaps)
        table["killed"] = to_time(table["killed_at"])
        st.dataframe(table[["killed", "kind", "guarantee", "down_ms", "undecided", "replayed", "p99_after_recovery_ms",
                            "filled_by_accurate", "accurate_max_ms"]], hide_index=True, width="stretch",
                     column_config={"killed": st.column_config.DatetimeColumn("killed (UTC)", format="HH:mm:ss"),
                                    "down_ms": st.column_config.NumberColumn("down", format="%d ms"),
                                    "p99_after_recovery_ms": st.column_config.NumberColumn(
                                        "p99 after recovery", format="%d ms"),
                                    "filled_by_accurate": st.column_config.NumberColumn("filled by accurate"),
                                    "accurate_max_ms": st.column_config.NumberColumn("accurate, at most",
                                                                                     format="%d ms")})


def headline(db):
    """The detector's quality on data it was not tuned on: the newest `bench handbook` run (per
    aggregator) and the newest `bench quality` run (the evaluation set), each with what it ran on."""
    st.subheader("Quality on data the detector was not tuned on")
    rows, run = quality.latest_handbook(db)
    if run is None:
        st.info(text.NO_HANDBOOK_RUN, icon=":material/science:")
    else:
        for r in rows.itertuples():
            cols = st.columns([1.4, 1, 1, 1], vertical_alignment="center")
            cols[0].markdown(f"**{r.model}**  \nthe handbook's test week")
            for col, (key, label) in zip(cols[1:], quality.HANDBOOK_METRICS.items()):
                col.metric(label, fmt.decimal(getattr(r, key), 3), border=True,
                           help=f"{label} on the test week, after the handbook's exclusions "
                                f"(its best published: {text.HANDBOOK_BEST}).")
        st.caption(text.handbook_run(run, rows))
    ev = quality.evaluation_headline(db)
    if ev is None:
        ui.no_data("the evaluation set has not been measured yet — run `python -m bench quality --json`.")
        return
    cols = st.columns([1.4, 1, 1, 1], vertical_alignment="center")
    cols[0].markdown("**The evaluation set**  \nthe project's own, all fraud patterns")
    for col, (key, label) in zip(cols[1:], (("average_precision", "Average precision"), ("precision", "Precision"),
                                            ("recall", "Recall"))):
        value = ev[key]
        col.metric(label, fmt.decimal(value, 3) if key == "average_precision" else fmt.percent(value), border=True)
    st.caption(text.evaluation_run(ev))


ui.live(draw)
