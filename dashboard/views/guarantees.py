"""Guarantees: the same input counted three ways, each against the truth at its own committed cut."""
import streamlit as st

from controlplane.faults import target
from dashboard import charts, fmt, ui
from dashboard.data import guarantees as data
from dashboard.data.fraud import quality as fraud_quality
from dashboard.data.store import now_ms
from dashboard.views import text
from infra.contracts import GUARANTEES
from pipelines.guarantees import POLICIES, counts

st.title("Delivery guarantees")
st.caption("One usage query per guarantee, same input (the decisions topic), each with its own checkpoint "
           "and sink. Every few seconds the auditor cuts each query at the offsets it has committed: truth = "
           "distinct txn_ids up to there, counted = what its sink applied for those batches. Lost and "
           "duplicated are exact at that cut; records beyond it are lag (behind), never loss. Times are UTC.")

STORY_MINUTES = 60


def draw(db, s):
    now = now_ms()
    latest = data.latest(db)
    processed = latest[latest["metric"] == "processed"].set_index("guarantee")
    if processed.empty:
        ui.no_data("the auditor has not compared any usage count with the truth yet.")
        sinks = counts(db)
        if sinks:
            st.caption("What the sinks hold so far, not yet audited: " + "; ".join(
                f"{g} {fmt.count(c['processed'])}" for g, c in sorted(sinks.items())) + ".")
        return
    cols = st.columns(3)
    for col, g in zip(cols, GUARANTEES):
        if g not in processed.index:
            col.metric(g, fmt.NONE, help="No audit row for this guarantee yet.", border=True)
            continue
        row = processed.loc[g].to_dict()
        col.metric(g, fmt.count(row["observed"]), delta=text.versus_truth(row["observed"], row["truth"]),
                   delta_color="gray", delta_arrow="off", border=True,
                   help=f"Counted by the {g} sink at the audit of {fmt.clock(row['ts'])}, against the truth "
                        f"up to its committed batch {fmt.count(row['committed_batch'])}.")
        col.markdown(text.audit_badges(row))
        col.caption(POLICIES[g].sentence[0].upper() + POLICIES[g].sentence[1:] + ".")
    fq = fraud_quality(db)
    if fq["ts"] is not None:
        st.caption(text.fraud_job(fq))

    st.subheader("What each guarantee did")
    st.caption(f"Each change of lost or duplicated in the last {STORY_MINUTES} minutes, with the sink ledger's "
               "record of it and the faults and restarts measured at that moment.")
    stories = data.stories(db, now, STORY_MINUTES)
    for g in GUARANTEES:
        changes = stories[g]
        row = processed.loc[g].to_dict() if g in processed.index else None
        if not changes:
            st.markdown(f"{text.badge(g)} {text.quiet(row)}")
            continue
        st.markdown(f"{text.badge(g)}\n" + "\n".join(f"- {text.change(ch)}" for ch in changes))

    series = data.audit_series(db, now)
    faults = data.fault_marks(db, now, job=data.JOB)
    left, right = st.columns([2, 3])
    ui.chart(charts.counts_vs_truth(latest), "guarantees.counts", left)
    ui.chart(charts.guarantee_error(series, faults), "guarantees.error", right)
    if not faults.empty:
        st.caption("Faults on the chart: " + "; ".join(
            f"{f.kind} on {target(f.kind, f.job)} at {f.time:%H:%M:%S} ({f.status})" for f in faults.itertuples()))
    ui.chart(charts.lag(series), "guarantees.lag")


ui.live(draw)
