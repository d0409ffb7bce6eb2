"""Fraud: what the detector flagged, why (each analyzer's score), and how right and complete it is."""
import streamlit as st

from dashboard import charts, fmt, ui
from dashboard.data import fraud as data
from dashboard.data.store import now_ms
from dashboard.views import text

st.title("Fraud")
st.caption("Three analyzers score every transaction; the aggregator combines them into one decision. "
           "Precision and recall come from the auditor, against the simulator's labels. Times are UTC.")


def draw(db, s):
    now = now_ms()
    q = data.quality(db)
    cols = st.columns(4)
    audited = q["ts"] is not None
    why = "Empty: the auditor has not compared decisions with the labels yet."
    cols[0].metric("Precision", fmt.percent(q["precision"]), border=True,
                   help="Flagged transactions that really are fraud (labels)." if q["precision"] is not None else why)
    cols[1].metric("Recall", fmt.percent(q["recall"]), border=True,
                   help="Fraudulent transactions (labels) that were flagged." if q["recall"] is not None else why)
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
    flagged = data.flagged(db, 50)
    if flagged.empty:
        ui.no_data("no transaction flagged as fraud.")
        return
    left, right = st.columns([2, 3])
    left.plotly_chart(charts.scores(flagged), width="stretch")
    with right:
        series = data.quality_series(db, now)
        if series.empty:
            ui.no_data("no precision or recall measured in the last 30 minutes.")
        else:
            st.plotly_chart(charts.quality(series), width="stretch")
    st.subheader("Recently flagged")
    st.dataframe(flagged[["decided", "txn_id", "card_id", "amount", *data.SCORE_COLUMNS, "score", "latency_ms"]],
                 hide_index=True, width="stretch", height=380,
                 column_config={"decided": st.column_config.DatetimeColumn("decided (UTC)", format="HH:mm:ss"),
                                "amount": st.column_config.NumberColumn(format="localized"),
                                "latency_ms": st.column_config.NumberColumn("latency", format="%d ms"),
                                **{c: st.column_config.ProgressColumn(c.removeprefix("score_").replace("_", " "),
                                                                      min_value=0, max_value=1, format="%.2f")
                                   for c in [*data.SCORE_COLUMNS, "score"]}})


ui.live(draw)
