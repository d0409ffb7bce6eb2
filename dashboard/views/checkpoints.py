"""Checkpoints & state: every micro-batch, the state it keeps, and the restores after crashes."""
import streamlit as st

from dashboard import charts, data, ui

st.title("Checkpoints & state")
st.caption("From Spark's StreamingQueryListener: one row per micro-batch of every query (last 15 minutes).")


def draw(db, s):
    now = data.now_ms()
    df = data.batches(db, now)
    if df.empty:
        ui.no_data("no micro-batch recorded — the Spark jobs have not run a batch.")
        return
    summary = data.state_now(df)
    st.dataframe(summary, hide_index=True, width="stretch",
                 column_config={"state_memory_bytes": st.column_config.NumberColumn("state bytes", format="%d"),
                                "median_commit_ms": st.column_config.NumberColumn("median checkpoint ms"),
                                "median_duration_ms": st.column_config.NumberColumn("median batch ms")})
    left, right = st.columns(2)
    left.plotly_chart(charts.per_query(df, "duration_ms", "Batch duration", "ms"), width="stretch")
    right.plotly_chart(charts.per_query(df, "commit_ms", "Checkpoint (offset + commit log) time", "ms"),
                       width="stretch")
    left, right = st.columns(2)
    left.plotly_chart(charts.state(df), width="stretch")
    with right:
        st.subheader("Restores")
        rest = data.restores(db, now)
        if rest.empty:
            st.info("No restore: no batch was run twice in the last hour.", icon="✅")
        else:
            st.caption("Batches a query ran more than once: a restart restored the checkpoint and replayed them.")
            st.dataframe(rest, hide_index=True, width="stretch",
                         column_config={"replayed_at": st.column_config.DatetimeColumn(format="HH:mm:ss")})
        rec = data.recoveries(db, 10)
        if not rec.empty:
            st.caption("Latest recoveries: " + "; ".join(
                f"{r.job} after {r.fault}: {r.seconds:.1f} s" for r in rec.itertuples()))
    st.subheader("Batch history")
    recent = df.sort_values("ts", ascending=False).head(100)
    st.dataframe(recent[["time", "query", "batch_id", "num_input_rows", "processed_rows_per_s", "duration_ms",
                         "commit_ms", "state_rows", "state_memory_bytes", "state_rows_dropped_late"]],
                 hide_index=True, width="stretch", height=320,
                 column_config={"time": st.column_config.DatetimeColumn(format="HH:mm:ss")})


ui.live(draw)
