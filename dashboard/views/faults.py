"""Faults: break things on purpose (one row per fault of the catalogue), see each command's life and
how long recovery took."""
import streamlit as st

from controlplane.faults import CATALOGUE, FAULTS
from dashboard import charts, fmt, forms, ui
from dashboard.data import faults as data
from dashboard.views import text

st.title("Faults")
st.caption("Each button adds a command to the store; the executor the fault catalogue names (the supervisor, "
           "the job itself, or the simulator) carries it out once and records the outcome below. Times are UTC.")

token = ui.token_field("faults_token")
WIDTHS = [2, 1.3, 2, 3.4]
head = st.columns(WIDTHS)
for col, name in zip(head[1:], ("target", "parameters", "what happens")):
    col.caption(f"**{name}**")
for kind in FAULTS:
    fault = CATALOGUE[kind]
    c1, c2, c3, c4 = st.columns(WIDTHS, vertical_alignment="center")
    job = forms.job_input(c2, kind)
    params = {p.name: forms.param_input(c3, kind, p) for p in fault.params}
    if not fault.params:
        c3.caption("none")
    c4.markdown(f"{fault.sentence[0].upper()}{fault.sentence[1:]}. *Carried out by the {fault.executor}.*")
    if c1.button(f"Inject {kind}", key=f"inject_{kind}", width="stretch", icon=":material/bolt:"):
        forms.issue(kind, job, params, token)


def draw(db, s):
    st.subheader("Command log")
    log = data.command_log(db, 50)
    if log.empty:
        ui.no_data("no command issued yet.")
    else:
        log = log.assign(params=[text.params(k, p) for k, p in zip(log["kind"], log["params"])],
                         recovered_s=log["recovered_s"].map(fmt.duration_s))
        st.dataframe(log[["id", "issued", "kind", "job", "params", "status", "took_s", "recovered_s", "result"]],
                     hide_index=True, width="stretch", height=min(400, 38 + 35 * len(log)),
                     column_config={"issued": st.column_config.DatetimeColumn("issued (UTC)", format="HH:mm:ss"),
                                    "took_s": st.column_config.NumberColumn("took", format="%.1f s"),
                                    "recovered_s": st.column_config.TextColumn(
                                        "recovered in",
                                        help="Kill → the job's first new batch with rows, as the supervisor measured it."),
                                    "id": st.column_config.NumberColumn(format="%d")})
    left, right = st.columns([3, 2])
    with left:
        st.subheader("Recovery times")
        rec = data.recoveries(db)
        if rec.empty:
            ui.no_data("no recovery measured (inject a crash).")
        else:
            ui.chart(charts.recoveries(rec), "faults.recoveries")
            slowest = rec.loc[rec["seconds"].idxmax()]
            by = "; ".join(f"{'warm standby' if via == 'standby' else 'cold restart'}: median "
                           f"{fmt.duration_s(part['seconds'].median())} over {len(part):,}"
                           for via, part in rec.groupby("via"))
            st.caption(f"{by}; slowest {fmt.duration_s(slowest['seconds'])} "
                       f"({slowest['job']} after {slowest['fault']}).")
    with right:
        st.subheader("Fenced writes and bad input")
        rej = data.rejected_writes(db)
        st.metric("Zombie writes rejected", fmt.count(data.rejected_total(db)), border=True,
                  help="Writes a stale instance tried with an old fencing epoch (the zombie fault).")
        if not rej.empty:
            st.dataframe(rej[["job", "epoch", "current_epoch", "what"]], hide_index=True, width="stretch")
        dl = data.dead_letters(db)
        st.metric("Dead letters", fmt.count(dl["count"].sum() if not dl.empty else 0), border=True,
                  help="Malformed messages the fraud job sent to the dead-letter topic, with their reason.")
        if not dl.empty:
            st.dataframe(dl[["reason", "count"]], hide_index=True, width="stretch",
                         column_config={"count": st.column_config.NumberColumn(format="localized")})
        kept = data.not_kept(db)
        st.metric("Read, not kept", fmt.count(kept["count"].sum() if not kept.empty else 0), border=True,
                  help="Records a job read and did not keep, each counted with why: decisions a usage query "
                       "rejected as breaking the contract, and decisions the fraud job's store did not keep "
                       "because their txn_id was decided before (the decisions topic has every one).")
        if not kept.empty:
            st.dataframe(kept[["query", "count", "why"]], hide_index=True, width="stretch",
                         column_config={"count": st.column_config.NumberColumn(format="localized")})
        st.metric("Dead-letter sends failed", fmt.count(data.dead_letter_send_failures(db)), border=True,
                  help="Dead-letter batches (and poison records) whose Kafka transaction failed; each is retried "
                       "until it is sent, and decisions go on meanwhile.")

    st.subheader("Poison batches")
    q = data.quarantines(db)
    if q.empty:
        ui.no_data(f"no batch has failed {s.poison_batch_failures} times the same way (inject poison-pill).")
    else:
        st.dataframe(q[["when", "query", "batch_id", "offsets", "failures", "dead_lettered", "reason", "status"]],
                     hide_index=True, width="stretch",
                     column_config={"when": st.column_config.DatetimeColumn("when (UTC)", format="HH:mm:ss"),
                                    "batch_id": st.column_config.NumberColumn("batch", format="%d"),
                                    "offsets": st.column_config.TextColumn("Kafka range"),
                                    "failures": st.column_config.NumberColumn("failed", format="%d ×"),
                                    "dead_lettered": st.column_config.NumberColumn("dead-lettered", format="%d")})
        st.caption(text.poison_batches(q, s.poison_batch_failures))


ui.live(draw)
