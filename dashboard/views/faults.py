"""Faults: break things on purpose, see the command's life, and how long recovery took."""
import streamlit as st

from dashboard import charts, data, ui
from controlplane.faults import FAULTS

st.title("Faults")
st.caption("Each button adds a command to the store; the supervisor carries it out once and records "
           "the outcome below.")

# What each fault's button offers, matching `python -m pipelines.control FAULT [--job J] [--seconds N]`
# and the parameters the supervisor and the jobs read (seconds, count, guarantee).
FORMS = {
    "crash": dict(jobs=["fraud", "usage"], what="the job's driver gets SIGKILL; the supervisor restarts it"),
    "crash-after-sink": dict(jobs=["usage"], guarantee=["at-least-once", "exactly-once", "at-most-once"],
                             what="the job kills itself after its sink write, before Spark commits the batch"),
    "sink-down": dict(jobs=["usage"], seconds=10, what="the usage sink rejects writes for N seconds"),
    "task-failure": dict(jobs=["usage"], guarantee=["every query", "at-most-once", "at-least-once", "exactly-once"],
                         what="processing of the next batch raises inside a Spark task"),
    "broker-down": dict(jobs=[None], seconds=10, what="the Kafka broker stops for N seconds, then restarts"),
    "late-burst": dict(jobs=["simulator"], count=200, what="the simulator emits a burst of late, out-of-order events"),
    "bad-input": dict(jobs=["simulator"], count=50, what="the simulator emits malformed messages (to the dead-letter topic)"),
    "zombie": dict(jobs=["usage", "fraud"], seconds=15,
                   what="a stale second instance runs on the same checkpoint for N seconds; fencing rejects its writes"),
}

token = ui.token_field("faults_token")
head = st.columns([2, 1.3, 1.5, 3.2])
for col, label in zip(head, ("", "job", "parameter", "what happens")):
    col.caption(f"**{label}**")
for fault in FAULTS:
    form = FORMS.get(fault, dict(jobs=["fraud", "usage"], what=""))
    c1, c2, c3, c4 = st.columns([2, 1.3, 1.5, 3.2], vertical_alignment="center")
    jobs = form["jobs"]
    if len(jobs) > 1:
        job = c2.selectbox("job", jobs, key=f"job_{fault}", label_visibility="collapsed")
    else:
        job = jobs[0]
        c2.markdown(f"`{job or 'broker'}`")
    params = {}
    if "seconds" in form:
        params["seconds"] = int(c3.number_input("seconds", 1, 600, form["seconds"], key=f"seconds_{fault}",
                                                label_visibility="collapsed", help="seconds"))
    elif "count" in form:
        params["count"] = int(c3.number_input("events", 1, 100_000, form["count"], key=f"count_{fault}",
                                              label_visibility="collapsed", help="events"))
    elif "guarantee" in form:
        chosen = c3.selectbox("query", form["guarantee"], key=f"guarantee_{fault}", label_visibility="collapsed")
        if chosen != "every query":
            params["guarantee"] = chosen
    c4.markdown(form["what"] + (" (seconds)" if "seconds" in form else " (events)" if "count" in form else ""))
    if c1.button(f"Inject {fault}", key=f"inject_{fault}", width="stretch", icon=":material/bolt:"):
        if ui.authorized(token):
            def send(db, s, fault=fault, job=job, params=params):
                cid = data.issue(db, fault, job, **params)
                said = "".join(f", {k} = {v}" for k, v in params.items())
                st.success(f"Command {cid} issued: {fault} on {job or 'the broker'}{said}. "
                           "Its outcome appears in the command log below.", icon=":material/bolt:")
            ui.draw_with_store(send)


def draw(db, s):
    st.subheader("Command log")
    log = data.command_log(db, 50)
    if log.empty:
        ui.no_data("no command issued yet.")
    else:
        st.dataframe(log, hide_index=True, width="stretch", height=min(400, 38 + 35 * len(log)),
                     column_config={"issued": st.column_config.DatetimeColumn(format="HH:mm:ss"),
                                    "took_s": st.column_config.NumberColumn("took (s)")})
    left, right = st.columns([3, 2])
    with left:
        st.subheader("Recovery times")
        rec = data.recoveries(db)
        if rec.empty:
            ui.no_data("no recovery measured (inject a crash).")
        else:
            st.plotly_chart(charts.recoveries(rec), width="stretch")
            st.caption(f"Median {rec['seconds'].median():.1f} s over {len(rec)} recoveries; "
                       f"slowest {rec['seconds'].max():.1f} s ({rec.loc[rec['seconds'].idxmax(), 'fault']}).")
    with right:
        st.subheader("Fenced writes and bad input")
        rej = data.rejected_writes(db)
        st.metric("Zombie writes rejected", f"{data.rejected_total(db):,}")
        if not rej.empty:
            st.dataframe(rej[["job", "epoch", "current_epoch", "what"]], hide_index=True, width="stretch")
        dl = data.dead_letters(db)
        st.metric("Dead letters", f"{int(dl['count'].sum()):,}" if not dl.empty else "0")
        if not dl.empty:
            st.dataframe(dl[["reason", "count"]], hide_index=True, width="stretch")


ui.live(draw)
