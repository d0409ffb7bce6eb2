"""Controls: steer the simulator, and choose the real-time fraud path's guarantee, through commands,
one per control of the fault catalogue."""
import streamlit as st

from controlplane.faults import CATALOGUE, CONTROLS
from dashboard import fmt, forms, ui
from dashboard.data import controls as data
from dashboard.data.faults import command_log
from dashboard.views import text

st.title("Controls")
st.caption("Each control adds a command to the store: the simulator applies its own; the supervisor applies the "
           "fraud job's guarantee by restarting the job with it. Each records its outcome. A field starts at the "
           "value last asked for (empty when never sent). Times are UTC.")

token = ui.token_field("controls_token")


def _last(db, s):
    st.session_state["_last_controls"] = data.last_controls(db)


ui.draw_with_store(_last)
asked = st.session_state.get("_last_controls", {})

with_params = [k for k in CONTROLS if CATALOGUE[k].params]
switches = [k for k in CONTROLS if not CATALOGUE[k].params]
for col, kind in zip(st.columns(max(1, len(with_params))), with_params):
    control = CATALOGUE[kind]
    with col:
        params = {p.name: forms.param_input(st, kind, p, data.last_value(asked, kind, p.name))
                  for p in control.params}
        st.caption(control.sentence[0].upper() + control.sentence[1:] + ".")
        if st.button(kind.replace("-", " ").capitalize(), key=f"send_{kind}", width="stretch"):
            forms.issue(kind, control.default_job, params, token)
ICONS = {"pause": ":material/pause:", "resume": ":material/play_arrow:"}
for col, kind in zip(st.columns([1] * len(switches) + [4]), switches):
    if col.button(kind.capitalize(), key=f"send_{kind}", icon=ICONS.get(kind), width="stretch",
                  help=CATALOGUE[kind].sentence):
        forms.issue(kind, CATALOGUE[kind].default_job, {}, token)


def draw(db, s):
    st.subheader("What was last asked")
    last = data.last_controls(db)
    cols = st.columns(1 + len(with_params))
    cols[0].metric("State", "paused" if last.get("paused") else "running", border=True,
                   help="From the newest pause or resume command (running when none was sent).")
    for col, kind in zip(cols[1:], with_params):
        p = CATALOGUE[kind].params[0]
        cmd = last.get(kind)
        value = data.last_value(last, kind, p.name)
        shown = (fmt.NONE if value is None else str(value) if p.kind is str
                 else fmt.decimal(value, 3) + ("" if p.unit == "share" else f" {p.unit}"))
        who = CATALOGUE[kind].default_job
        col.metric((forms.label(p) if who == data.SIMULATOR else f"{who} {forms.label(p)}").capitalize(), shown,
                   delta=None if not cmd else cmd["status"], delta_color="gray", delta_arrow="off", border=True,
                   help=f"Never sent: the {who} runs with its own setting." if not cmd else cmd["result"])
    log = command_log(db, 20, kinds=CONTROLS)
    if log.empty:
        ui.no_data("no control sent.")
    else:
        log = log.assign(params=[text.params(k, p) for k, p in zip(log["kind"], log["params"])])
        st.dataframe(log[["id", "issued", "job", "kind", "params", "status", "took_s", "result"]], hide_index=True,
                     width="stretch",
                     column_config={"issued": st.column_config.DatetimeColumn("issued (UTC)", format="HH:mm:ss"),
                                    "took_s": st.column_config.NumberColumn("took", format="%.1f s"),
                                    "id": st.column_config.NumberColumn(format="%d")})


ui.live(draw)
