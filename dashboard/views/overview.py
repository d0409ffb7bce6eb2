"""Overview: is CardStream keeping up? Rates in and out, fraud share, latency vs 20 ms, jobs, lag."""
import pandas as pd
import streamlit as st

from dashboard import charts, fmt, measured, ui
from dashboard.data import kafka, overview as data
from dashboard.data.faults import dead_letters
from dashboard.data.store import now_ms, to_time
from dashboard.views import text

st.title("Overview")
st.caption("Transactions in, decisions out, how fast, and whether the jobs keep up with Kafka. "
           "Times are UTC.")

GOAL = data.LATENCY_GOAL_MS


def draw(db, s):
    now = now_ms()
    for row in data.startup(db, now):
        st.info(text.starting(row), icon=":material/rocket_launch:")
    r = data.rates(db, now)
    every = data.recent_latencies(db)
    start = data.warmup(db)
    lat, warm = data.split_warmup(every, start)
    summary = data.latency_summary(lat)
    cols = st.columns(6)
    cols[0].metric("Tx in /s", fmt.decimal(r["transactions_per_s"]), border=True,
                   help=(f"Input rate of the fraud job's batches in the last {r['rate_window_s']} s "
                         "(Spark's inputRowsPerSecond)." if r["transactions_per_s"] is not None else
                         f"Empty: the fraud job finished no batch in the last {r['rate_window_s']} s, or only its first "
                         "batch after a start, for which Spark reports no rate."))
    cols[1].metric("Decisions /s", fmt.decimal(r["decisions_per_s"]), border=True,
                   help=f"Decisions written to the store in the last {r['window_s']} s.")
    cols[2].metric("Fraud rate", fmt.percent(r["fraud_rate"]), border=True,
                   help="Share of the last decisions flagged as fraud." if r["fraud_rate"] is not None else
                   f"Empty: no decision in the last {r['window_s']} s.")
    for col, name in zip(cols[3:], ("p50", "p95", "p99")):
        value = summary[name]
        col.metric(f"Latency {name}", fmt.duration_ms(value),
                   delta=None if value is None else (f"within {GOAL} ms" if value <= GOAL else f"over {GOAL} ms"),
                   delta_color="green" if value is not None and value <= GOAL else "red",
                   delta_arrow="off", border=True,
                   help=f"decided_at − produced_at over the newest {summary['n']:,} decisions after the warm-up."
                   if value is not None else
                   ("Empty: every recent decision belongs to the warm-up (below)." if not warm.empty
                    else "Empty: no decision in the store yet."))
    if not warm.empty:
        st.caption(text.warmup(start, len(warm)))
    if summary["n"]:
        st.caption(f"Latency over the newest {fmt.count(summary['n'])} decisions after the warm-up: "
                   f"{fmt.percent(summary['within_goal'])} decided within {GOAL} ms.")
    if not every.empty:
        series = data.latency_series(every)
        # the warm-up on the time axis: from the first batch's start to the last decision that waited for it
        shade = ({"start": to_time(pd.Series([start["batch_started"]])).iloc[0],
                  "end": to_time(warm["decided_at"]).max()} if not warm.empty else None)
        commands = data.timeline(db, int(every["decided_at"].min()) - 60_000, now)
        left, right = st.columns([7, 3])
        left.plotly_chart(charts.overview_timeline(series, GOAL, commands, shade), width="stretch")
        if commands.empty:
            left.caption("No command (fault or control) issued while these decisions were made: the timeline "
                         "row is empty.")
        else:
            left.caption("Each command is a diamond at the time it ran (green done, red failed, amber running, "
                         "grey waiting); a fault the supervisor measured has a bar from the kill to the first "
                         "new batch with rows, labelled with its recovery time and how (standby or restart).")
        if summary["n"]:
            right.plotly_chart(charts.latency_histogram(lat, GOAL, "stateful"), width="stretch")
            right.caption("Stateful path: the fraud job's decisions in the store (`decisions`).")
        else:
            with right:
                ui.no_data("the histogram leaves out the warm-up, and every recent decision belongs to it.")
        with right:
            draw_rt_histogram(db, s)
    else:
        ui.no_data("no decisions in the store — start the simulator and the fraud job.")

    st.subheader("Jobs")
    master_ui = data.cluster_ui(s)
    if master_ui:
        st.markdown(f"The jobs run on the Spark standalone cluster `{s.spark_master}`: its master's UI, with "
                    f"the workers, applications and executors, is [{master_ui}]({master_ui}).")
    jobs = data.job_status(db, now)
    if jobs.empty:
        ui.no_data("the supervisor has not reported any job.")
    else:
        ids = {c: jobs[c].map(lambda v: fmt.NONE if fmt._missing(v) else str(int(v))) for c in ("last_batch", "pid")}
        shown = jobs.assign(**ids, spark_ui=jobs["spark_ui"].fillna(""))
        st.dataframe(shown[["job", "status", "restarts", "last_batch", "seen_s_ago", "pid", "spark_ui", "detail"]],
                     hide_index=True, width="stretch",
                     column_config={"seen_s_ago": st.column_config.NumberColumn("seen", format="%.1f s ago"),
                                    "spark_ui": st.column_config.LinkColumn("Spark UI", display_text=r"https?://(.*)"),
                                    "last_batch": st.column_config.TextColumn("last batch"),
                                    "restarts": st.column_config.NumberColumn(format="%d")})
        with_ui = jobs["spark_ui"].notna().sum()
        st.caption(f"Spark UI: {fmt.count(with_ui)} of the Spark processes link theirs (each job and standby "
                   "has its own port, 4040 or the next free one, on 127.0.0.1). A Spark job without a link "
                   "is still starting its session, or runs with SPARK_UI=0." if with_ui else
                   "Spark UI: no process links one yet — a Spark job writes its UI's address once its "
                   "session is up; SPARK_UI=0 turns the UI off.")
    dl = dead_letters(db)
    if not dl.empty:
        st.caption(f"Bad input sent to the dead-letter topic: {fmt.count(dl['count'].sum())} messages "
                   f"({', '.join(f'{r.reason}: {fmt.count(r.count)}' for r in dl.itertuples())}).")
    st.subheader("Consumer lag")
    draw_lag(db, s)
    measured.draw(db)


def draw_rt_histogram(db, s):
    """The real-time path's latency (decisions-rt, in Kafka only), when the job has run that path."""
    started = data.rt_start(db)
    if started is None:
        st.caption("Real-time path: none — the fraud job has not run in real-time mode (FRAUD_MODE=realtime), "
                   "so there is no `decisions-rt` latency to show.")
        return
    try:
        pairs = ui.rt_latencies(s.kafka_bootstrap, s.topics.decisions_rt)
    except kafka.BrokerDown as exc:
        st.caption(f"Real-time path: unknown — Kafka {exc}, and its decisions live only in `decisions-rt`.")
        return
    rt, warm = data.rt_latencies(pairs, started)
    if rt.empty:
        ui.no_data(f"no real-time decision in `{s.topics.decisions_rt}` since its query started at "
                   f"{fmt.clock(started)}" + (f" ({fmt.count(warm)} of its warm-up left out)." if warm else "."))
        return
    st.plotly_chart(charts.latency_histogram(rt, GOAL, "real-time"), width="stretch")
    p99 = float(rt["latency_ms"].quantile(0.99))
    st.caption(f"Real-time path: the newest {fmt.count(len(rt))} decisions in `{s.topics.decisions_rt}` (Kafka), "
               f"p99 {fmt.duration_ms(p99)}, {fmt.percent((rt['latency_ms'] <= GOAL).mean())} within {GOAL} ms"
               + (f"; {fmt.count(warm)} of the warm-up (produced before its query started at "
                  f"{fmt.clock(started)}) left out." if warm else "."))


def draw_lag(db, s):
    last = data.last_batch_offsets(db)
    if not last:
        ui.no_data("no query has finished a batch, so there is no lag to measure.")
        return
    found = ui.broker_probe(s.kafka_bootstrap)
    if not found.up:
        st.warning(f"Kafka {'broker down' if found.down else 'not answering'}: {found.server} {found.says()}, "
                   "so the lag is unknown. Where each query's last batch got to:", icon=":material/cloud_off:")
        lag = data.consumer_lag(None, last)
        st.dataframe(lag[["query", "topic", "processed", "last_batch"]], hide_index=True, width="stretch",
                     column_config={"processed": st.column_config.NumberColumn("last batch end (records)", format="localized"),
                                    "last_batch": st.column_config.NumberColumn("last batch", format="%d")})
        return
    try:
        ends = ui.end_offsets(s.kafka_bootstrap, tuple(data.lag_topics(last)))
    except kafka.BrokerDown as exc:
        st.warning(f"Kafka {exc}: the lag is unknown.", icon=":material/cloud_off:")
        return
    lag = data.consumer_lag(ends, last)
    if lag.empty:
        ui.no_data("the topics the queries read are not in Kafka.")
        return
    st.dataframe(lag[["query", "topic", "lag", "kafka_end", "processed"]], hide_index=True, width="stretch",
                 column_config={"lag": st.column_config.NumberColumn("lag (records)", format="localized"),
                                "kafka_end": st.column_config.NumberColumn("Kafka end", format="localized"),
                                "processed": st.column_config.NumberColumn("last batch end", format="localized")})
    st.caption("Lag = Kafka's end offsets minus the end offsets of each query's last committed batch "
               "(records not read yet: behind, not lost).")


ui.live(draw)
