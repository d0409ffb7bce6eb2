"""Overview: is CardStream keeping up? Rates in and out, fraud rate, latency vs 20 ms, jobs, lag."""
import streamlit as st

from dashboard import charts, data, ui

st.title("Overview")
st.caption("Transactions in, decisions out, how fast, and whether the jobs keep up with Kafka.")


def draw(db, s):
    now = data.now_ms()
    r = data.rates(db, now)
    lat = data.recent_latencies(db)
    summary = data.latency_summary(lat)
    cols = st.columns(6)
    cols[0].metric("Tx in /s", ui.number(r["transactions_per_s"], 1), border=True,
                   help="Input rate of the fraud job's last batches (Spark's inputRowsPerSecond).")
    cols[1].metric("Decisions /s", ui.number(r["decisions_per_s"], 1), border=True,
                   help=f"Decisions written in the last {r['window_s']} s.")
    cols[2].metric("Fraud rate", ui.percent(r["fraud_rate"]), border=True, help="Share of recent decisions flagged as fraud.")
    goal = data.LATENCY_GOAL_MS
    for col, name in zip(cols[3:], ("p50", "p95", "p99")):
        value = summary[name]
        col.metric(f"Latency {name}", ui.number(value, 1, " ms"),
                   delta=None if value is None else ("within 20 ms" if value <= goal else "over 20 ms"),
                   delta_color="green" if value is not None and value <= goal else "red",
                   delta_arrow="off", border=True)
    if summary["n"]:
        st.caption(f"Latency over the newest {summary['n']:,} decisions: "
                   f"{ui.percent(summary['within_goal'])} decided within {goal} ms.")
        series = data.latency_series(lat)
        left, right = st.columns([3, 2])
        left.plotly_chart(charts.latency(series, goal), width="stretch")
        right.plotly_chart(charts.throughput(series), width="stretch")
    else:
        ui.no_data("no decisions in the store — start the simulator and the fraud job.")

    left, right = st.columns(2)
    with left:
        st.subheader("Jobs")
        jobs = data.job_status(db, now)
        if jobs.empty:
            ui.no_data("the supervisor has not reported any job.")
        else:
            st.dataframe(jobs[["job", "status", "restarts", "last_batch", "seen_s_ago", "pid", "detail"]],
                         hide_index=True, width="stretch",
                         column_config={"seen_s_ago": st.column_config.NumberColumn("seen (s ago)"),
                                        "last_batch": st.column_config.NumberColumn("last batch")})
        dl = data.dead_letters(db)
        if not dl.empty:
            st.caption(f"Bad input sent to the dead-letter topic: {int(dl['count'].sum()):,} messages "
                       f"({', '.join(f'{r.reason}: {r.count:,}' for r in dl.itertuples())}).")
    with right:
        st.subheader("Consumer lag")
        draw_lag(db, s)


def draw_lag(db, s):
    last = data.last_batch_offsets(db)
    if not last:
        ui.no_data("no query has finished a batch, so there is no lag to measure.")
        return
    if not ui.broker_answers(s.kafka_bootstrap):
        st.warning(f"Kafka broker down: {s.kafka_bootstrap} does not answer, so the lag is unknown. "
                   "Where each query's last batch got to:", icon=":material/cloud_off:")
        st.dataframe(data.consumer_lag({}, last, known_ends=False), hide_index=True, width="stretch")
        return
    topics = sorted({t for b in last.values() for t in b["offsets"]})
    try:
        ends = ui.end_offsets(s.kafka_bootstrap, tuple(topics))
    except data.BrokerDown as exc:
        st.warning(f"Kafka {exc}: the lag is unknown.", icon=":material/cloud_off:")
        return
    lag = data.consumer_lag(ends, last)
    if lag.empty:
        ui.no_data("the topics the queries read are not in Kafka.")
        return
    st.dataframe(lag[["query", "lag", "kafka_end", "processed", "topic"]], hide_index=True, width="stretch",
                 column_config={"lag": st.column_config.NumberColumn("lag", format="%d"),
                                "kafka_end": st.column_config.NumberColumn("Kafka end"),
                                "processed": st.column_config.NumberColumn("last batch end")})
    st.caption("Lag = Kafka's end offsets minus the end offsets of each query's last batch.")


ui.live(draw)
