"""Fraud: what the detector flagged, why (each analyzer's score), and how right it is."""
import streamlit as st

from dashboard import charts, data, ui

st.title("Fraud")
st.caption("Three analyzers score every transaction; the aggregator combines them into one decision. "
           "Precision and recall come from the auditor, against the simulator's labels.")


def draw(db, s):
    now = data.now_ms()
    q = data.fraud_quality(db)
    cols = st.columns(4)
    cols[0].metric("Precision", ui.percent(q["precision"]), border=True, help="Flagged transactions that really are fraud.")
    cols[1].metric("Recall", ui.percent(q["recall"]), border=True, help="Fraudulent transactions that were flagged.")
    cols[2].metric("Decided", ui.number(q["processed_observed"]), border=True, delta_arrow="off", delta_color="gray",
                   delta=None if q["processed_truth"] is None else f"of {q['processed_truth']:,} sent")
    cols[3].metric("Flagged", ui.number(q["fraud_observed"]), border=True, delta_arrow="off", delta_color="gray",
                   delta=None if q["fraud_truth"] is None else f"{q['fraud_truth']:,} labelled fraud")
    if q["ts"] is None:
        ui.no_data("the auditor has not compared decisions with the labels yet.")
    flagged = data.flagged(db, 50)
    if flagged.empty:
        ui.no_data("no transaction flagged as fraud.")
        return
    left, right = st.columns([2, 3])
    left.plotly_chart(charts.scores(flagged), width="stretch")
    with right:
        series = data.quality_series(db, now)
        if not series.empty:
            st.plotly_chart(charts.quality(series), width="stretch")
    st.subheader("Recently flagged")
    st.dataframe(flagged[["decided", "txn_id", "card_id", "amount", *data.SCORE_COLUMNS, "score", "latency_ms"]],
                 hide_index=True, width="stretch", height=380,
                 column_config={"decided": st.column_config.DatetimeColumn(format="HH:mm:ss"),
                                "amount": st.column_config.NumberColumn(format="%.2f"),
                                **{c: st.column_config.ProgressColumn(c.removeprefix("score_"), min_value=0,
                                                                      max_value=1, format="%.2f")
                                   for c in [*data.SCORE_COLUMNS, "score"]}})


ui.live(draw)
