"""Controls: steer the simulator (rate, fraud share, late share, pause, resume) through commands."""
import streamlit as st

from dashboard import data, ui

st.title("Simulator controls")
st.caption("Each control adds a command for the simulator (job `simulator`) to the store; the simulator "
           "applies it and records the outcome.")

token = ui.token_field("controls_token")


def send(kind, **params):
    if not ui.authorized(token):
        return

    def write(db, s):
        cid = data.issue(db, kind, "simulator", **params)
        said = ", ".join(f"{k} = {v}" for k, v in params.items())
        st.success(f"Command {cid} issued: {kind}" + (f" ({said})." if said else "."))
    ui.draw_with_store(write)


c1, c2, c3 = st.columns(3)
with c1:
    rate = st.number_input("Rate (transactions/s)", min_value=1, max_value=1_000_000, value=1000, step=100)
    if st.button("Set rate", width="stretch"):
        send("set-rate", rate=int(rate))
with c2:
    fraud = st.slider("Fraud rate", 0.0, 0.5, 0.02, 0.005, format="%.3f")
    if st.button("Set fraud rate", width="stretch"):
        send("set-fraud-rate", fraud_rate=float(fraud))
with c3:
    late = st.slider("Late rate", 0.0, 0.5, 0.05, 0.005, format="%.3f")
    if st.button("Set late rate", width="stretch"):
        send("set-late-rate", late_rate=float(late))
p1, p2, _ = st.columns([1, 1, 4])
if p1.button("Pause", icon=":material/pause:", width="stretch"):
    send("pause")
if p2.button("Resume", icon=":material/play_arrow:", width="stretch"):
    send("resume")


def draw(db, s):
    st.subheader("What the simulator was last asked")
    now_set = data.simulator_settings(db)
    cols = st.columns(4)
    cols[0].metric("State", "paused" if now_set.get("paused") else "running", border=True,
                   help="From the newest pause or resume command (running when none was sent).")
    for col, (kind, name, label) in zip(cols[1:], (("set-rate", "rate", "Rate"),
                                                   ("set-fraud-rate", "fraud_rate", "Fraud rate"),
                                                   ("set-late-rate", "late_rate", "Late rate"))):
        cmd = now_set.get(kind)
        col.metric(label, "—" if not cmd else f"{cmd['params'].get(name)}",
                   delta=None if not cmd else cmd["status"], delta_color="gray", delta_arrow="off", border=True)
    log = data.command_log(db, 20, job="simulator")
    if log.empty:
        ui.no_data("no command sent to the simulator.")
    else:
        st.dataframe(log, hide_index=True, width="stretch",
                     column_config={"issued": st.column_config.DatetimeColumn(format="HH:mm:ss")})


ui.live(draw)
