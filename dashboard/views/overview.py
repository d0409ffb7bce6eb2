"""Overview: is CardStream keeping up? Rates in and out, fraud share, latency vs 20 ms, jobs, lag."""
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from dashboard import charts, fmt, measured, ui
from dashboard.data import kafka, overview as data
from dashboard.data.faults import dead_letters, not_kept
from dashboard.data.store import now_ms, to_time
from dashboard.views import text

st.title("Overview")
st.caption("Transactions in, decisions out, how fast, and whether the jobs keep up with Kafka. "
           "Times are UTC.")

GOAL = data.LATENCY_GOAL_MS
MEASURE = ("the decision's Kafka append time minus its transaction's, both the broker's clock, as `python -m "
           "bench latency` measures: queueing, batching, scoring, the store and the Kafka commit counted")


@dataclass
class Latencies:
    """One path's newest decisions as latencies (tx_appended, dec_appended, latency_ms): `steady`
    after its warm-up, `warm` the warm-up left out, `unmatched` decisions whose transaction was not
    found; `why` (and no frames) when they cannot be read."""
    topic: str
    steady: pd.DataFrame | None = None
    warm: pd.DataFrame | None = None
    unmatched: int = 0
    why: str | None = None

    @property
    def every(self) -> pd.DataFrame:
        return pd.concat([self.steady, self.warm]).sort_values("dec_appended")


def read_latencies(s, topic: str, cut: int | None) -> Latencies:
    """The newest decisions of `topic` with their transactions' append times, split at `cut`."""
    try:
        found = ui.append_latencies(s.kafka_bootstrap, topic, s.topics.transactions)
    except kafka.BrokerDown as exc:
        return Latencies(topic, why=f"Kafka {exc}")
    except kafka.NotAppendTime as exc:
        return Latencies(topic, why=str(exc))
    steady, warm = data.split_warmup(data.latency_frame(found.pairs), cut)
    return Latencies(topic, steady, warm, found.unmatched)


def draw(db, s):
    now = now_ms()
    say_what_is_starting(db, now)
    start = data.warmup(db)
    stateful = read_latencies(s, s.topics.decisions, start["batch_started"] if start else None)
    rt_started = data.rt_start(db)
    rt = read_latencies(s, s.topics.decisions_rt, rt_started) if rt_started is not None else None
    # the tiles and the timeline: the real-time path's decisions while the job runs it (the decision a
    # payment waits for, the 20 ms goal's), else the stateful path's
    live_rt = rt is not None and rt.why is None and data.rt_running(db)
    lat = rt if live_rt else stateful
    summary = data.latency_summary(lat.steady if lat.why is None else pd.DataFrame(columns=data.LATENCY_COLUMNS))
    cols = st.columns(6)
    draw_rate_tiles(cols[:3], data.rates(db, s.topics.transactions, now))
    draw_latency_tiles(cols[3:], summary, lat)
    say_latency_rule(None if live_rt else start, lat, summary, rt_started if live_rt else None)
    if live_rt:
        say_stateful_beside(stateful)
    cut = rt_started if live_rt else (start["batch_started"] if start else None)
    draw_latency_charts(db, lat, cut, now, stateful, rt, rt_started)
    st.subheader("Jobs")
    draw_jobs(db, s, now)
    say_what_was_not_kept(db)
    st.subheader("Consumer lag")
    draw_lag(db, s)
    measured.draw(db)


def say_what_is_starting(db, now: int) -> None:
    for row in data.startup(db, now):
        st.info(text.starting(row), icon=":material/rocket_launch:")


def draw_rate_tiles(cols, r: dict) -> None:
    cols[0].metric("Tx in /s", fmt.decimal(r["transactions_per_s"]), border=True,
                   help=(f"Transactions read by the fraud job's batches in the last {r['rate_window_s']} s "
                         "(Spark's inputRowsPerSecond of its transactions source; its labels not counted)."
                         if r["transactions_per_s"] is not None else
                         f"Empty: the fraud job finished no batch in the last {r['rate_window_s']} s, or only its first "
                         "batch after a start, for which Spark reports no rate."))
    cols[1].metric("Decisions /s", fmt.decimal(r["decisions_per_s"]), border=True,
                   help=f"Decisions written to the store in the last {r['window_s']} s.")
    cols[2].metric("Fraud rate", fmt.percent(r["fraud_rate"]), border=True,
                   help="Share of the last decisions flagged as fraud." if r["fraud_rate"] is not None else
                   f"Empty: no decision in the last {r['window_s']} s.")


def draw_latency_tiles(cols, summary: dict, lat: Latencies) -> None:
    """p50, p95, p99 of one path's latency after its warm-up, each against the goal."""
    for col, name in zip(cols, ("p50", "p95", "p99")):
        value = summary[name]
        if value is not None:
            why = f"{MEASURE.capitalize()}; over the newest {summary['n']:,} decisions of `{lat.topic}` after the warm-up."
        elif lat.why:
            why = f"Unknown: {lat.why}."
        elif lat.warm is not None and not lat.warm.empty:
            why = "Empty: every recent decision belongs to the warm-up (below)."
        else:
            why = f"Empty: no decision in `{lat.topic}` yet."
        col.metric(f"Latency {name}", fmt.duration_ms(value),
                   delta=None if value is None else (f"within {GOAL} ms" if value <= GOAL else f"over {GOAL} ms"),
                   delta_color="green" if value is not None and value <= GOAL else "red",
                   delta_arrow="off", border=True, help=why)


def say_latency_rule(start: dict | None, lat: Latencies, summary: dict, rt_started: int | None = None) -> None:
    """What the latency figures are, the warm-up they leave out and what could not be matched
    (`rt_started`: they are the real-time path's, whose query started then)."""
    if lat.why:
        st.warning(f"Decision latency unknown: {lat.why}.", icon=":material/cloud_off:")
        return
    if not lat.warm.empty:
        st.caption(text.warmup(start, len(lat.warm)) if rt_started is None else
                   f"Warm-up left out: {fmt.count(len(lat.warm))} decisions of transactions in Kafka before the "
                   f"real-time query started ({fmt.clock(rt_started)}): they waited for its start.")
    if summary["n"]:
        path = "the real-time path's" if rt_started is not None else "the stateful path's"
        st.caption(f"Latency of {path} newest {fmt.count(summary['n'])} decisions after the warm-up, read from "
                   f"`{lat.topic}`: {fmt.percent(summary['within_goal'])} decided within {GOAL} ms. "
                   f"Latency is {MEASURE}.")
    say_unmatched(lat)


def say_unmatched(lat: Latencies) -> None:
    if lat.unmatched:
        st.caption(f"{fmt.count(lat.unmatched)} of the newest decisions of `{lat.topic}` are left out: their "
                   "transaction was not found in the part of the transactions topic read (from shortly before the "
                   "oldest decision's production).")


def say_stateful_beside(stateful: Latencies) -> None:
    """The stateful path's figures in a sentence, when the tiles are the real-time path's."""
    if stateful.why or stateful.steady.empty:
        return
    st.caption(f"The stateful path beside it (`{stateful.topic}`, exactly once, every transaction, in batches): "
               f"p50 {fmt.duration_ms(float(stateful.steady['latency_ms'].quantile(0.5)))}, "
               f"p99 {fmt.duration_ms(float(stateful.steady['latency_ms'].quantile(0.99)))} over its newest "
               f"{fmt.count(len(stateful.steady))} decisions.")
    say_unmatched(stateful)


def draw_latency_charts(db, lat: Latencies, cut: int | None, now: int, stateful: Latencies,
                        rt: Latencies | None, rt_started: int | None) -> None:
    """The latency and command timeline (of `lat`, the tiles' path, its warm-up shaded from `cut`)
    beside the two paths' histograms."""
    if lat.why:
        return
    every = lat.every
    if every.empty:
        ui.no_data(f"no decision in `{lat.topic}` (Kafka) yet — start the simulator and the fraud job.")
        return
    # the warm-up on the time axis: from the start (the first batch's, or the real-time query's) to the
    # last decision that waited for it
    shade = ({"start": to_time(pd.Series([cut])).iloc[0], "end": to_time(lat.warm["dec_appended"]).max()}
             if cut is not None and not lat.warm.empty else None)
    commands = data.timeline(db, int(every["dec_appended"].min()) - 60_000, now)
    left, right = st.columns([7, 3])
    ui.chart(charts.overview_timeline(data.latency_series(every), GOAL, commands, shade), "overview.timeline", left)
    if commands.empty:
        left.caption("No command (fault or control) issued while these decisions were made: the timeline "
                     "row is empty.")
    else:
        left.caption("Each command is a diamond at the time it ran (green done, red failed, amber running, "
                     "grey waiting); a fault the supervisor measured has a bar from the kill to the first "
                     "new batch with rows, labelled with its recovery time and how (standby or restart).")
    with right:
        if stateful.why is None and not stateful.steady.empty:
            ui.chart(charts.latency_histogram(stateful.steady, GOAL, "stateful"), "overview.stateful")
            st.caption(f"Stateful path: the fraud job's decisions in `{stateful.topic}` (Kafka, exactly once).")
        elif stateful.why is None and not stateful.warm.empty:
            ui.no_data("the histogram leaves out the warm-up, and every recent decision belongs to it.")
        elif stateful.why is None:
            ui.no_data(f"no decision in `{stateful.topic}` (Kafka) yet.")
        draw_rt_histogram(rt, rt_started)


def draw_rt_histogram(rt: Latencies | None, started: int | None):
    """The real-time path's latency (decisions-rt, in Kafka only), when the job has run that path."""
    if rt is None:
        st.caption("Real-time path: none — the fraud job has not run in real-time mode (FRAUD_MODE=realtime), "
                   "so there is no `decisions-rt` latency to show.")
        return
    if rt.why:
        st.caption(f"Real-time path: unknown — {rt.why}, and its decisions live only in `{rt.topic}`.")
        return
    warm = len(rt.warm)
    if rt.steady.empty:
        ui.no_data(f"no real-time decision in `{rt.topic}` since its query started at "
                   f"{fmt.clock(started)}" + (f" ({fmt.count(warm)} of its warm-up left out)." if warm else "."))
        return
    ui.chart(charts.latency_histogram(rt.steady, GOAL, "real-time"), "overview.real_time")
    p99 = float(rt.steady["latency_ms"].quantile(0.99))
    st.caption(f"Real-time path: the newest {fmt.count(len(rt.steady))} decisions in `{rt.topic}` (Kafka), "
               f"p99 {fmt.duration_ms(p99)}, {fmt.percent((rt.steady['latency_ms'] <= GOAL).mean())} within {GOAL} ms"
               + (f"; {fmt.count(warm)} of the warm-up (in Kafka before its query started at "
                  f"{fmt.clock(started)}) left out." if warm else "."))


def draw_jobs(db, s, now: int) -> None:
    """Each job and standby as the supervisor last wrote it, with its Spark UI."""
    master_ui = data.cluster_ui(s)
    if master_ui:
        st.markdown(f"The jobs run on the Spark standalone cluster `{s.spark_master}`: its master's UI, with "
                    f"the workers, applications and executors, is [{master_ui}]({master_ui}).")
    jobs = data.job_status(db, now)
    if jobs.empty:
        ui.no_data("the supervisor has not reported any job.")
        return
    ids = {c: jobs[c].map(lambda v: fmt.NONE if fmt._missing(v) else str(int(v))) for c in ("last_batch", "pid")}
    shown = jobs.assign(**ids, spark_ui=jobs["spark_ui"].fillna(""))
    st.dataframe(shown[["job", "status", "restarts", "last_batch", "seen_s_ago", "pid", "spark_ui", "detail"]],
                 hide_index=True, width="stretch",
                 column_config={"seen_s_ago": st.column_config.NumberColumn("seen", format="%.1f s ago"),
                                "spark_ui": st.column_config.LinkColumn("Spark UI", display_text=r"https?://(.*)"),
                                "last_batch": st.column_config.TextColumn("last batch"),
                                "restarts": st.column_config.NumberColumn(format="%d")})
    for gap in data.standby_gaps(jobs):
        st.warning(gap, icon=":material/sync_problem:")
    with_ui = jobs["spark_ui"].notna().sum()
    st.caption(f"Spark UI: {fmt.count(with_ui)} of the Spark processes link theirs (each job and standby "
               "has its own port, 4040 or the next free one, on 127.0.0.1). A Spark job without a link "
               "is still starting its session, or runs with SPARK_UI=0." if with_ui else
               "Spark UI: no process links one yet — a Spark job writes its UI's address once its "
               "session is up; SPARK_UI=0 turns the UI off.")


def say_what_was_not_kept(db) -> None:
    """Bad input dead-lettered, and records a job read and did not keep, each with why."""
    dl = dead_letters(db)
    if not dl.empty:
        st.caption(f"Bad input sent to the dead-letter topic: {fmt.count(dl['count'].sum())} messages "
                   f"({', '.join(f'{r.reason}: {fmt.count(r.count)}' for r in dl.itertuples())}).")
    kept = not_kept(db)
    if not kept.empty:
        st.caption("Read and not kept: " + "; ".join(f"{r.query} {fmt.count(r.count)}, {r.why}"
                                                     for r in kept.itertuples()) + ".")


def draw_lag(db, s):
    last = data.last_batch_offsets(db)
    if not last:
        ui.no_data("no query has finished a batch, so there is no lag to measure.")
        return
    found = ui.broker_probe(s.kafka_bootstrap)
    if not found.up:
        st.warning(f"Kafka {found.verdict}: {found.server} {found.says()}, "
                   "so the lag is unknown. Where each query's last batch got to:", icon=":material/cloud_off:")
        lag = data.consumer_lag(None, last)
        st.dataframe(lag[["query", "topic", "processed", "last_batch"]], hide_index=True, width="stretch",
                     column_config={"processed": st.column_config.NumberColumn("last batch end (records)", format="localized"),
                                    "last_batch": st.column_config.NumberColumn("last batch", format="%d")})
        return
    try:
        ends = ui.end_offsets(s.kafka_bootstrap, tuple(data.lag_topics(last)),
                              after_ts=max(b["ts"] for b in last.values()))
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
