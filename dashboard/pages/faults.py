"""Faults: break things on purpose, see the command's life, and how long recovery took."""
import streamlit as st

from dashboard import charts, data, ui
from infra.contracts import FAULTS

st.title("Faults")
st.caption("Each button adds a command to the store; the supervisor carries it out once and records "
           "the outcome below.")

# fault -> (jobs it applies to, takes seconds?, default seconds, what happens)
FORMS = {
    "crash": (["fraud", "usage"], False, 0, "the job's driver gets SIGKILL; the supervisor restarts it"),
    "crash-after-sink": (["usage", "fraud"], False, 0,
                         "the job kills itself after its sink write, before Spark commits the batch"),
    "sink-down": (["usage"], True, 10, "the usage sink rejects writes for N seconds"),
    "task-failure": (["fraud", "usage"], False, 0, "processing of the next batch raises inside a task"),
    "broker-down": (["broker"], True, 10, "the Kafka broker stops for N seconds, then restarts"),
    "late-burst": (["simulator"], False, 0, "the simulator emits a burst of late and out-of-order events"),
    "bad-input": (["simulator"], False, 0, "the simulator emits malformed messages (to the dead-letter topic)"),
    "zombie": (["usage", "fraud"], False, 0, "a second instance starts on the same checkpoint; fencing must reject it"),
}

token = ui.token_field("faults_token")
for fault in FAULTS:
    jobs, timed, default, what = FORMS.get(fault, (["fraud", "usage"], False, 0, ""))
    c1, c2, c3, c4 = st.columns([2, 1.2, 1, 3], vertical_alignment="bottom")
    job = c2.selectbox("job", jobs, key=f"job_{fault}", label_visibility="collapsed") if len(jobs) > 1 else jobs[0]
    if len(jobs) == 1:
        c2.markdown(f"`{job}`")
    seconds = c3.number_input("seconds", 1, 600, default, key=f"seconds_{fault}",
                              label_visibility="collapsed") if timed else None
    c4.caption(what + (f" ({seconds} s)" if timed else ""))
    if c1.button(f"Inject {fault}", key=f"inject_{fault}", width="stretch"):
        if ui.authorized(token):
            params = {"seconds": int(seconds)} if timed else {}
            target = None if job == "broker" else job

            def send(db, s, fault=fault, target=target, params=params):
                cid = data.issue(db, fault, target, **params)
                st.toast(f"Command {cid} issued: {fault} on {target or 'the broker'}.", icon="⚡")
                st.success(f"Command {cid} issued: {fault} on {target or 'the broker'}.")
            ui.draw_with_store(send)


def draw(db, s):
    st.subheader("Command log")
    log = data.command_log(db, 50)
    if log.empty:
        ui.no_data("no command issued yet.")
    else:
        st.dataframe(log, hide_index=True, width="stretch", height=300,
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
