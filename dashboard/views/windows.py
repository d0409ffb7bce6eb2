"""Windows: the usage job's event-time windows, its watermark, and what came too late."""
import streamlit as st

from dashboard import charts, data, ui

st.title("Event-time windows")
st.caption("Tumbling, sliding and session windows over event time. Events later than the watermark "
           "are dropped and counted.")

KINDS = ("tumbling", "sliding", "session")


def draw(db, s):
    now = data.now_ms()
    st.subheader("Watermark")
    wm = data.watermarks(db, now)
    if wm.empty:
        ui.no_data("no query has reported a watermark.")
    else:
        cols = st.columns(min(len(wm), 4))
        for col, r in zip(cols * 10, wm.itertuples()):
            col.metric(r.query, f"{r.watermark:%H:%M:%S}", delta=f"{r.behind_s:,.0f} s behind now",
                       delta_color="gray", delta_arrow="off", border=True)
    late = data.late_events(db)
    dropped = data.dropped_by_watermark(db, now)
    c1, c2 = st.columns([1, 3])
    c1.metric("Late events dropped", f"{int(late['dropped'].sum()) if not late.empty else 0:,}",
              help="Counted by the usage job per window kind.", border=True)
    c1.metric("Dropped by Spark", help="Rows Spark's stateful operators dropped as too late, last 30 minutes.",
              border=True, value=
              f"{int(dropped['dropped'].fillna(0).sum()) if not dropped.empty else 0:,}")
    with c2:
        series = data.late_series(db, now)
        if series.empty:
            ui.no_data("no late event dropped in the last 30 minutes.")
        else:
            st.plotly_chart(charts.late(series), width="stretch")

    tabs = st.tabs([k.capitalize() for k in KINDS])
    for tab, kind in zip(tabs, KINDS):
        with tab:
            df = data.windows(db, kind, now)
            if df.empty:
                ui.no_data(f"no {kind} window results in the last 30 minutes.")
                continue
            if kind == "session":
                st.plotly_chart(charts.sessions(df), width="stretch")
            else:
                st.plotly_chart(charts.windows(df, kind), width="stretch")
            st.dataframe(df[["key", "start", "end", "length_s", "processed", "fraud"]].head(200),
                         hide_index=True, width="stretch", height=260,
                         column_config={"start": st.column_config.DatetimeColumn(format="HH:mm:ss"),
                                        "end": st.column_config.DatetimeColumn(format="HH:mm:ss"),
                                        "length_s": st.column_config.NumberColumn("length (s)")})


ui.live(draw)
