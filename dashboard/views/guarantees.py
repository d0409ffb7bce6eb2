"""Guarantees: the same input counted three ways, each against the truth Kafka holds."""
import streamlit as st

from dashboard import charts, data, ui
from infra.contracts import GUARANTEES

st.title("Delivery guarantees")
st.caption("One usage query per guarantee, same input, own checkpoint and sink. Truth = distinct "
           "txn_ids in Kafka's decisions topic. Faults injected from the Faults page are marked on the chart.")

COLORS = {"at-most-once": "red", "at-least-once": "orange", "exactly-once": "green"}
BADGES = {g: f":{c}-badge[{g}]" for g, c in COLORS.items()}


def draw(db, s):
    now = data.now_ms()
    latest = data.latest_audit(db, "usage")
    processed = latest[latest["metric"] == "processed"].set_index("guarantee") if not latest.empty else None
    if processed is None or processed.empty:
        ui.no_data("the auditor has not compared any usage count with the truth yet.")
        counts = data.usage_counts(db)
        if not counts.empty:
            st.dataframe(counts, hide_index=True)
        return
    cols = st.columns(3)
    for col, g in zip(cols, GUARANTEES):
        if g not in processed.index:
            col.metric(g, "—", help="no audit row yet", border=True)
            continue
        row = processed.loc[g]
        off = int(row["observed"]) - int(row["truth"])
        col.metric(g, f"{int(row['observed']):,}",
                   delta=f"{off:+,} vs truth {int(row['truth']):,}" if off else f"= truth {int(row['truth']):,}",
                   delta_color="gray" if off == 0 else "red", delta_arrow="off", border=True)

    st.subheader("What each guarantee just did")
    for g, line in data.guarantee_stories(db, now).items():
        st.markdown(line.replace(f"**{g}**", BADGES[g], 1))

    left, right = st.columns([2, 3])
    left.plotly_chart(charts.counts_vs_truth(latest), width="stretch")
    series = data.audit_series(db, "usage", "processed", now)
    faults = data.fault_marks(db, now)
    right.plotly_chart(charts.guarantee_error(series, faults), width="stretch")
    if not faults.empty:
        st.caption("Faults on the chart: " + "; ".join(
            f"{f.kind} on {f.job or 'the broker'} at {f.time:%H:%M:%S} ({f.status})" for f in faults.itertuples()))


ui.live(draw)
