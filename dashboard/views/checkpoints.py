"""Checkpoints & state: every micro-batch, the state it keeps, where each checkpoint stands, the
batches run again after a restart (Spark's own logs and the sink ledger), and each process's memory
and the bytes on disk over time (the supervisor's housekeeping)."""
import streamlit as st

from dashboard import charts, fmt, ui
from dashboard.data import checkpoints as data
from dashboard.data.faults import recoveries
from dashboard.data.overview import job_status
from dashboard.data.store import now_ms
from dashboard.views import text

st.title("Checkpoints & state")
st.caption("Spark's progress of every micro-batch (last 15 minutes), each checkpoint as Spark left it on disk, "
           "the batches run twice, and what every process and the store weigh (last 24 hours). Times are UTC.")

TIME = st.column_config.DatetimeColumn(format="HH:mm:ss")


def draw(db, s):
    now = now_ms()
    df = data.batches(db, now)
    if df.empty:
        ui.no_data("no micro-batch recorded — the Spark jobs have not run a batch.")
    else:
        batch_summary(df)
        batch_times(df)
        stage_split(db)
        one_query(df)
    checkpoint_positions(db, s, now)
    batches_run_again(db, s, now)
    latest_recoveries(db)
    if not df.empty:
        state_and_history(df)


def batch_summary(df):
    """One row per query: its last batch, the state it keeps, its median commit and batch."""
    summary = data.state_now(df)
    summary["state_mib"] = summary["state_memory_bytes"] / 2**20
    st.dataframe(summary[["query", "last_batch", "state_rows", "state_mib", "median_commit_ms",
                          "median_duration_ms", "checkpoint"]], hide_index=True, width="stretch",
                 column_config={"last_batch": st.column_config.NumberColumn("last batch", format="%d"),
                                "state_rows": st.column_config.NumberColumn("state rows", format="localized"),
                                "state_mib": st.column_config.NumberColumn("state memory", format="%.1f MiB"),
                                "median_commit_ms": st.column_config.NumberColumn("median commit", format="%d ms"),
                                "median_duration_ms": st.column_config.NumberColumn("median batch", format="%d ms")})


def batch_times(df):
    left, right = st.columns(2)
    ui.chart(charts.per_query(df, "duration_ms", "Batch duration", "duration (ms)"), "checkpoints.duration", left)
    ui.chart(charts.per_query(df, "commit_ms", "Checkpoint time (offset log + commit log)", "duration (ms)"),
             "checkpoints.commit", right)


def stage_split(db):
    """Where the fraud batches' time goes, stage by stage."""
    split = data.stage_breakdown(db)
    if split.empty:
        ui.no_data("no fraud batch with rows yet: nothing to split into stages.")
        return
    ui.chart(charts.stages(split), "checkpoints.stages")
    st.caption(text.stages(split))


def one_query(df):
    """One query's batches, chosen in a select box (the fraud job's first)."""
    st.subheader("Per query")
    queries = sorted(df["query"].unique(), key=lambda q: (q != "fraud", q))
    query = st.selectbox("query", queries, index=0, key="health_query")
    part = df[df["query"] == query]
    ui.chart(charts.query_health(part, query), f"checkpoints.query.{query}")  # another query: drawn at once
    st.caption(text.query_health(part))


def checkpoint_positions(db, s, now):
    """Each checkpoint's last planned and committed batch, as Spark left them on disk."""
    st.subheader("Where each checkpoint stands")
    pos = data.positions(s.checkpoint_root, now)
    if pos.empty:
        ui.no_data(f"no checkpoint under {s.checkpoint_root} yet.")
        return
    jobs = job_status(db, now)
    running = set(jobs.loc[jobs["status"] == "running", "job"]) if not jobs.empty else set()
    shown = pos.assign(query_id=pos["query_id"].map(fmt.short_id),
                       state=[text.checkpoint_state(r, r["job"] in running) for r in pos.to_dict("records")])
    st.dataframe(shown[["query", "query_id", "state"]], hide_index=True, width="stretch",
                 column_config={"query_id": st.column_config.TextColumn("checkpoint (query id)"),
                                "state": st.column_config.TextColumn(width="large")})
    st.caption(f"From Spark's offset log (a batch is planned there before it runs) and commit log "
               f"(written when it is done), under {s.checkpoint_root}.")


def batches_run_again(db, s, now):
    """The batches a restart ran again: from Spark's logs (left) and from the sink ledger (right)."""
    st.subheader("Batches run again after a restart")
    reruns = data.log_reruns(s.checkpoint_root, data.restart_times(db, now - 3_600_000))
    repeats = data.ledger_repeats(db, now)
    if reruns.empty and repeats.empty:
        st.info("Nothing ran twice: no batch in the checkpoints' logs was planned before a restart and committed after "
                "it, and no sink was handed a batch twice in the last hour.", icon="✅")
    left, right = st.columns(2)
    if not reruns.empty:
        left.caption("From Spark's logs: planned before the restart, not committed by then, committed after it "
                     "(the next run ran it again with the same offsets).")
        left.dataframe(reruns[["query", "batch_id", "planned", "what", "restart", "committed"]], hide_index=True,
                       width="stretch",
                       column_config={"batch_id": st.column_config.NumberColumn("batch", format="%d"),
                                      "planned": TIME, "committed": TIME,
                                      "restart": st.column_config.DatetimeColumn("restart at", format="HH:mm:ss"),
                                      "what": st.column_config.TextColumn("restart")})
    if not repeats.empty:
        right.caption("From the sink ledger: one batch (same checkpoint, same batch id) handed to its sink more "
                      "than once — applied twice counts it twice; applied, then skipped, counts it once.")
        right.dataframe(repeats.assign(checkpoint_id=repeats["checkpoint_id"].map(fmt.short_id))[
                            ["sink", "batch_id", "outcomes", "processed", "first", "last", "checkpoint_id"]],
                        hide_index=True, width="stretch",
                        column_config={"batch_id": st.column_config.NumberColumn("batch", format="%d"),
                                       "processed": st.column_config.NumberColumn("records", format="localized"),
                                       "first": TIME, "last": TIME,
                                       "checkpoint_id": st.column_config.TextColumn("checkpoint")})


def latest_recoveries(db):
    rec = recoveries(db, 10)
    if not rec.empty:
        st.caption("Latest recoveries: " + "; ".join(
            f"{r.job} after {r.fault} at {fmt.clock(r.killed_at)}: {fmt.duration_s(r.seconds)}"
            for r in rec.itertuples()) + ".")


def state_and_history(df):
    """The state each query keeps over time, beside its last 100 batches."""
    left, right = st.columns(2)
    ui.chart(charts.state(df), "checkpoints.state", left)
    with right:
        st.subheader("Batch history")
        recent = df.sort_values("ts", ascending=False).head(100)
        recent = recent.assign(processed_rows_per_s=recent["processed_rows_per_s"].round())
        st.dataframe(recent[["time", "query", "batch_id", "num_input_rows", "processed_rows_per_s", "duration_ms",
                             "commit_ms", "state_rows", "state_rows_dropped_late"]],
                     hide_index=True, width="stretch", height=420,
                     column_config={"time": st.column_config.DatetimeColumn("time (UTC)", format="HH:mm:ss"),
                                    "batch_id": st.column_config.NumberColumn("batch", format="%d"),
                                    "num_input_rows": st.column_config.NumberColumn("rows", format="localized"),
                                    "processed_rows_per_s": st.column_config.NumberColumn("rows/s", format="localized"),
                                    "duration_ms": st.column_config.NumberColumn("duration", format="%d ms"),
                                    "commit_ms": st.column_config.NumberColumn("commit", format="%d ms"),
                                    "state_rows": st.column_config.NumberColumn("state rows", format="localized"),
                                    "state_rows_dropped_late": st.column_config.NumberColumn("dropped late",
                                                                                             format="localized")})


def memory_and_disk(db, s):
    """Sampled every MEMORY_SAMPLE_SECONDS: redrawn on its own, less often than the batches above."""
    now = now_ms()
    st.subheader("Memory and disk")
    every = s.memory_sample_seconds
    mem = data.process_memory(db, now)
    if mem.empty:
        ui.no_data(f"no memory sample in the last {data.MEMORY_HOURS} h — the supervisor samples every long-lived "
                   f"process every {fmt.duration_s(every)} (MEMORY_SAMPLE_SECONDS), the first as it starts; "
                   "it is not running, or has only just started.")
    else:
        ui.chart(charts.process_memory(mem), "checkpoints.memory")
        st.caption(text.memory(data.memory_now(mem), every))
    disk = data.storage(db, now)
    kept = data.retention(db)
    if disk.empty:
        ui.no_data(f"no size of the store or the checkpoints sampled in the last {data.MEMORY_HOURS} h — the "
                   f"supervisor samples them with the memory, every {fmt.duration_s(every)}.")
    else:
        ui.chart(charts.storage(disk), "checkpoints.storage")
    latest = disk[disk["ts"] == disk["ts"].max()] if not disk.empty else disk
    st.caption(text.storage(latest, kept, s.store_retention_hours))


ui.live(draw)
ui.live(memory_and_disk, every=ui.sampled_every(ui.settings().memory_sample_seconds))
