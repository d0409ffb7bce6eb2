"""Windows: the usage job's event-time windows, each watermark and what it is for, and what came too late."""
import streamlit as st

from dashboard import charts, fmt, ui
from dashboard.data import windows as data
from dashboard.data.store import now_ms

st.title("Event-time windows")
st.caption("Tumbling (1 min), sliding (5 min every 1 min) and session windows over event time. An event "
           "older than the windows' watermark is not added to any window: it is counted apart as late. "
           "Times are UTC.")


def purposes(s) -> dict[str, str]:
    """What each query's watermark is, with its configured delay, and what it is for."""
    late = f"newest event time − WATERMARK_SECONDS ({fmt.decimal(s.watermark_seconds, unit='s')})"
    dedupe = (f"Spark's watermark: newest Kafka append time − DEDUPE_SECONDS / 2 "
              f"({fmt.decimal(s.dedupe_seconds / 2, unit='s')} of {fmt.decimal(s.dedupe_seconds, unit='s')})")
    return {
        "usage-windows": f"{late}: events older than this are late for the windows (counted, not added).",
        "usage-exactly-once": f"{dedupe}: a txn_id is remembered until this passes its first copy's append "
                              "time by as much again (DEDUPE_SECONDS behind the newest record) to drop a "
                              "duplicate; it trails the clock by design.",
        "fraud": f"{late}: a decision whose event time is older is marked late.",
    }


def draw(db, s):
    now = now_ms()
    st.subheader("Watermarks")
    wm = data.watermarks(db, now)
    if wm.empty:
        ui.no_data("no query has reported a watermark yet (the first batches with data set it).")
    else:
        why = purposes(s)
        cols = st.columns(min(len(wm), 4))
        for col, r in zip(cols * 10, wm.itertuples()):
            col.metric(r.query, f"{r.watermark:%H:%M:%S}", delta=f"{fmt.duration_s(r.behind_s)} behind now",
                       delta_color="gray", delta_arrow="off", border=True,
                       help=why.get(r.query, "Spark's event-time watermark of this query."))
            if r.query in why:
                col.caption(why[r.query])
    late = data.late_events(db)
    dropped = data.dropped_by_watermark(db, now)
    c1, c2 = st.columns([1, 3])
    c1.metric("Late events", fmt.count(late["dropped"].sum() if not late.empty else 0), border=True,
              help="Counted by the usage job per window kind (an event late for several windows counts for each).")
    c1.metric("Dropped by Spark", fmt.count(dropped["dropped"].fillna(0).sum() if not dropped.empty else 0),
              border=True, help="Rows Spark's stateful operators dropped as later than their watermark, "
                                "last 30 minutes.")
    with c2:
        series = data.late_series(db, now)
        if series.empty:
            ui.no_data("no late event in the last 30 minutes.")
        else:
            ui.chart(charts.late(series), "windows.late")

    tabs = st.tabs([k.capitalize() for k in data.KINDS])
    for tab, kind in zip(tabs, data.KINDS):
        with tab:
            df = data.windows(db, kind, now)
            if df.empty:
                ui.no_data(f"no {kind} window results in the last 30 minutes.")
                continue
            if kind == "session":
                ui.chart(charts.sessions(df), "windows.sessions")
            else:
                ui.chart(charts.windows(df, kind), f"windows.{kind}")
            st.dataframe(df[["key", "start", "end", "length_s", "processed", "fraud"]].head(200),
                         hide_index=True, width="stretch", height=260,
                         column_config={"start": st.column_config.DatetimeColumn("start (UTC)", format="HH:mm:ss"),
                                        "end": st.column_config.DatetimeColumn("end (UTC)", format="HH:mm:ss"),
                                        "length_s": st.column_config.NumberColumn("length", format="%d s"),
                                        "processed": st.column_config.NumberColumn("transactions", format="localized"),
                                        "fraud": st.column_config.NumberColumn(format="localized")})


ui.live(draw)
