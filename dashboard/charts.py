"""Plotly figure builders: DataFrames from dashboard.data in, figures out (no Streamlit, no store).

One look for every chart: white template, small margins, legend on top, one colour per guarantee
and per analyzer, kept the same on every page. Every axis has its unit; time axes are ticked in
hours:minutes:seconds (UTC) and span at least a minute, so a short series is never ticked in
fractions of a millisecond.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from dashboard.data.overview import BUCKET_S
from infra.contracts import ANALYZERS, GUARANTEES
from pipelines.engine.stages import STAGES

GUARANTEE_COLORS = {"at-most-once": "#E4572E", "at-least-once": "#F3A712", "exactly-once": "#29A19C"}
TRUTH_COLOR = "#5C6B73"
GOAL_COLOR = "#C0392B"
SERIES = ["#3A6EA5", "#29A19C", "#F3A712", "#E4572E", "#8E6C8A", "#5C6B73", "#2E8B57", "#B5651D"]
ANALYZER_COLORS = dict(zip(ANALYZERS, ["#3A6EA5", "#8E6C8A", "#2E8B57"]))
TIME_TITLE = "time (UTC)"
MIN_SPAN = pd.Timedelta(seconds=60)
TRACES = ("scatter", "bar", "histogram", "heatmap")  # the trace types these charts draw (a unit test holds it)
TEMPLATE = "cardstream-white"


def _lean(name: str = "plotly_white") -> go.layout.Template:
    """Plotly's `name` template with only what these charts use: its layout but for the subplot
    kinds they never draw (maps, polar, ternary, 3-D), and its defaults for their trace types alone.
    Why: a figure copies its template when it is set, and plotly_white's every trace type and
    subplot kind made that copy most of the time a chart took to build (bench/RESULTS.md#dashboard)."""
    full = pio.templates[name]
    layout = {k: v for k, v in full.layout.to_plotly_json().items()
              if k not in ("geo", "mapbox", "map", "polar", "scene", "ternary", "smith")}
    data = {k: v for k, v in full.data.to_plotly_json().items() if k in TRACES}
    return go.layout.Template(layout=layout, data=data)


pio.templates[TEMPLATE] = _lean()
pio.templates.default = TEMPLATE  # a new figure takes it as it is made, its cheapest way in


def _layout(fig: go.Figure, title: str, height: int = 340, y_title: str | None = None) -> go.Figure:
    if pio.templates.default != TEMPLATE:  # another library's since (Streamlit sets its own as it is imported)
        fig.update_layout(template=TEMPLATE)
    fig.update_layout(height=height, title=dict(text=title, x=0, font=dict(size=15)),
                      margin=dict(l=10, r=10, t=70, b=10),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1),
                      hovermode="x unified", separators=".,")
    if y_title:
        fig.update_yaxes(title_text=y_title)
    return fig


def _time_axis(fig: go.Figure, times, title: str = TIME_TITLE, **where) -> go.Figure:
    """Tick a time axis in h:m:s and widen it to a minute at least around the data."""
    fig.update_xaxes(tickformat="%H:%M:%S", hoverformat="%H:%M:%S", title_text=title, **where)
    values = pd.to_datetime(pd.Series(list(times)), errors="coerce").dropna()
    if not values.empty and values.max() - values.min() < MIN_SPAN:
        mid = values.min() + (values.max() - values.min()) / 2
        fig.update_xaxes(range=[mid - MIN_SPAN / 2, mid + MIN_SPAN / 2], **where)
    return fig


# A series' points a chart draws at most: more than a half-width chart has pixels across, and each
# is sent to the browser and drawn again at every redraw. Past it the series is drawn in bins of
# time (`binned`): 15 minutes of batches at a 1 s trigger are 900 a query, a day of memory samples
# 1,440 a process (docs/dashboard.md).
MAX_POINTS = 300
BIN_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)


def bin_seconds(times, densest: int | None = None, max_points: int = MAX_POINTS) -> int | None:
    """The shortest of BIN_STEPS_S leaving at most `max_points` bins over the span of `times`; None
    when the densest series (`densest` points; all of `times` by default) fits as it is."""
    values = pd.to_datetime(pd.Series(list(times)), errors="coerce").dropna()
    if (len(values) if densest is None else densest) <= max_points:
        return None
    span_s = (values.max() - values.min()).total_seconds()
    return next((s for s in BIN_STEPS_S if span_s / s < max_points), BIN_STEPS_S[-1])


def binned(part: pd.DataFrame, how: dict[str, str], by: str | None = None) -> tuple[pd.DataFrame, int | None]:
    """`part` (a `time` column) in bins of time when its densest series (per `by`) holds more than
    MAX_POINTS, each column of `how` summed up its way ("max", "last", "sum", "mean"), `time` the
    bin's newest; and the bin's seconds (None: `part` as it is)."""
    densest = (part[by].value_counts().max() if by else len(part)) if not part.empty else 0
    seconds = bin_seconds(part["time"], densest)
    if seconds is None:
        return part, None
    keys = [part["time"].dt.floor(f"{seconds}s").rename("_bin")] + ([part[by]] if by else [])
    how = {"time": "max", **({by: "first"} if by else {}), **how}
    out = part.groupby(keys, sort=True).agg(how).reset_index(drop=True)
    return out.sort_values(["time", by] if by else "time", kind="stable").reset_index(drop=True), seconds


def per_bin(seconds: int | None, what: str) -> str:
    """The words a chart adds when it is drawn in bins: " · the longest per 5 s"."""
    return "" if seconds is None else f" · {what} per {seconds:,} s"


def _lone_bar_width(times, ms: float) -> float | None:
    """A bar's width in ms when it stands alone on a time axis (Plotly sizes bars by the gaps between
    them, and draws a lone one too thin to see), else None: Plotly's own. A new run's first
    5 s of decisions is one bar."""
    return 0.8 * ms if pd.Series(list(times)).nunique() == 1 else None


def _counts_axis(fig: go.Figure, top=None, **where) -> go.Figure:
    """A y axis of whole counts from 0; below 5 ticked 0, 1, 2… (never half a record)."""
    fig.update_yaxes(tickformat=",~r", rangemode="tozero", **where)
    if top is not None and not pd.isna(top) and float(top) < 5:
        fig.update_yaxes(dtick=1, range=[0, max(1.0, float(top)) * 1.1], **where)
    return fig


def _legend_below(fig: go.Figure) -> go.Figure:
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.3, xanchor="left", x=0),
                      margin=dict(t=45))
    return fig


# --- overview -------------------------------------------------------------------------------------

def latency(series: pd.DataFrame, goal_ms: float = 20) -> go.Figure:
    """Decision latency percentiles per time bucket against the goal line."""
    fig = go.Figure()
    for name, color in (("p50", "#29A19C"), ("p95", "#3A6EA5"), ("p99", "#8E6C8A")):
        fig.add_trace(go.Scatter(x=series["time"], y=series[name], name=name, mode="lines+markers",
                                 line=dict(color=color, width=2), marker=dict(size=4),
                                 hovertemplate="%{y:,.1f} ms"))
    fig.add_hline(y=goal_ms, line=dict(color=GOAL_COLOR, dash="dash", width=2),
                  annotation_text=f"goal {goal_ms:g} ms", annotation_position="top left",
                  annotation_font_color=GOAL_COLOR)
    top = max([goal_ms * 1.3] + ([float(series["p99"].max()) * 1.1] if not series.empty else []))
    fig.update_yaxes(range=[0, top])
    _time_axis(fig, series["time"])
    return _layout(fig, f"Decision latency (Kafka append to append), per {BUCKET_S} s", y_title="latency (ms)")


def latency_histogram(latencies: pd.DataFrame, goal_ms: float = 20, path: str | None = None) -> go.Figure:
    """How the newest decisions' latencies are spread, with the goal line (`path`: whose decisions,
    in the title and colour)."""
    ms = latencies["latency_ms"].astype(float)
    color = PATH_COLORS.get(path or "", "#3A6EA5")
    fig = go.Figure(go.Histogram(x=ms, nbinsx=60, marker_color=color, opacity=0.85,
                                 hovertemplate="%{x} ms: %{y:,} decisions<extra></extra>"))
    fig.add_vline(x=goal_ms, line=dict(color=GOAL_COLOR, dash="dash", width=2),
                  annotation_text=f"goal {goal_ms:g} ms", annotation_position="top right",
                  annotation_font_color=GOAL_COLOR)
    fig.update_xaxes(title_text="latency (ms)", rangemode="tozero")
    _counts_axis(fig)
    fig = _layout(fig, f"{path.capitalize()} path: newest {len(ms):,} decisions" if path
                  else f"Latency of the newest {len(ms):,} decisions", y_title="decisions")
    fig.update_layout(hovermode="closest", bargap=0.05)
    return fig


def throughput(series: pd.DataFrame) -> go.Figure:
    fig = go.Figure(go.Bar(x=series["time"], y=series["decisions_per_s"], name="decisions/s",
                           width=_lone_bar_width(series["time"], BUCKET_S * 1000),
                           marker_color="#3A6EA5", hovertemplate="%{y:,.1f} decisions/s<extra></extra>"))
    _time_axis(fig, series["time"])
    _counts_axis(fig)
    return _layout(fig, f"Decisions per second, per {BUCKET_S} s", y_title="decisions/s")


STATUS_COLORS = {"done": "#29A19C", "failed": "#C0392B", "started": "#F3A712", "pending": "#5C6B73"}


def overview_timeline(series: pd.DataFrame, goal_ms: float, commands: pd.DataFrame,
                      warm: dict | None = None) -> go.Figure:
    """Latency percentiles, decisions per second and every command on one time axis: each command a
    marker at the time it ran, coloured by its outcome, and a fault the supervisor measured a bar
    from the kill to the first new batch with rows (its recovery time). `warm`: the fraud job's
    warm-up ({"start", "end"} as times) shaded across the panels."""
    rows = 3 if not commands.empty else 2
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.07,
                        row_heights=[0.45, 0.3, 0.25][:rows],
                        subplot_titles=(
                            f"decision latency (transaction's Kafka append to its decision's), per {BUCKET_S} s",
                            f"decisions per second, per {BUCKET_S} s", "commands: outcome and recovery")[:rows])
    fig.update_annotations(x=0, xanchor="left", font=dict(size=12, color="#555"))
    for name, color in (("p50", "#29A19C"), ("p95", "#3A6EA5"), ("p99", "#8E6C8A")):
        fig.add_trace(go.Scatter(x=series["time"], y=series[name], name=name, mode="lines+markers",
                                 line=dict(color=color, width=2), marker=dict(size=4),
                                 hovertemplate=f"{name} %{{y:,.1f}} ms<extra></extra>"), row=1, col=1)
    fig.add_hline(y=goal_ms, line=dict(color=GOAL_COLOR, dash="dash", width=2), row=1, col=1,
                  annotation_text=f"goal {goal_ms:g} ms", annotation_position="top left",
                  annotation_font_color=GOAL_COLOR)
    top = float(series["p99"].max()) if not series.empty else 0.0
    if top > 50 * goal_ms:  # a warm-up or an outage of seconds beside decisions of milliseconds
        low = max(0.1, min(float(series["p50"].min()), goal_ms) / 2)
        # ticked at powers of ten alone: Plotly's 2s and 5s between them read as latencies
        fig.update_yaxes(title_text="latency (ms, log)", type="log", row=1, col=1, dtick=1,
                         range=[np.log10(low), np.log10(top * 2)])
    else:
        fig.update_yaxes(title_text="latency (ms)", range=[0, max(goal_ms * 1.3, top * 1.1)], row=1, col=1)
    fig.add_trace(go.Bar(x=series["time"], y=series["decisions_per_s"], name="decisions/s", marker_color="#3A6EA5",
                         width=_lone_bar_width(series["time"], BUCKET_S * 1000), showlegend=False,
                         hovertemplate="%{y:,.1f} decisions/s<extra></extra>"), row=2, col=1)
    fig.update_yaxes(title_text="decisions/s", row=2, col=1)
    _counts_axis(fig, row=2, col=1)
    labels = []
    if rows == 3:
        labels = (commands["kind"] + " · " + commands["job"].fillna("broker")).tolist()
        rec = commands[commands["recovered_s"].notna()]
        for r, label in zip(rec.itertuples(), [lab for lab, ok in zip(labels, commands["recovered_s"].notna()) if ok]):
            fig.add_trace(go.Scatter(x=[r.killed, r.recovered], y=[label, label], mode="lines+text",
                                     line=dict(color="#E4572E", width=8), showlegend=False,
                                     text=["", f"recovered in {r.recovered_s:.1f} s ({r.via or 'restart'})"],
                                     textposition="middle right",
                                     hovertemplate=f"{label}: down {r.recovered_s:.1f} s, "
                                                   f"{r.via or 'restart'}<extra></extra>"), row=3, col=1)
        status = commands["status"].fillna("pending")
        fig.add_trace(go.Scatter(x=commands["time"], y=labels, mode="markers", showlegend=False,
                                 marker=dict(size=11, symbol="diamond",
                                             color=[STATUS_COLORS.get(v, "#5C6B73") for v in status]),
                                 customdata=list(zip(status, commands["result"].fillna("").str.slice(0, 90))),
                                 hovertemplate="%{y}: %{customdata[0]} — %{customdata[1]}<extra></extra>"),
                      row=3, col=1)
        fig.update_yaxes(title_text="command", type="category", row=3, col=1,
                         categoryorder="array", categoryarray=list(dict.fromkeys(labels)))
    if warm is not None:
        for row in range(1, rows + 1):
            fig.add_vrect(x0=warm["start"], x1=warm["end"], fillcolor="#F3A712", opacity=0.15, line_width=0, layer="below",
                          row=row, col=1)
        fig.add_annotation(x=warm["end"], y=1, yref="paper", text="warm-up", showarrow=False, xanchor="right",
                           yanchor="top", font=dict(size=11, color="#8a5a00"))
    times = [series["time"]] + ([commands["time"]] if not commands.empty else [])
    _time_axis(fig, pd.concat(times), row=rows, col=1)
    for row in range(1, rows):
        fig.update_xaxes(tickformat="%H:%M:%S", row=row, col=1)
    fig = _layout(fig, "Latency, throughput and every command, on one time axis", height=620 if rows == 3 else 480)
    fig.update_layout(margin=dict(t=60), legend=dict(orientation="h", yanchor="bottom", y=1.03, xanchor="right", x=1))
    return fig


# --- guarantees -----------------------------------------------------------------------------------

def counts_vs_truth(latest: pd.DataFrame) -> go.Figure:
    """Each guarantee's count next to the truth at the same cut."""
    rows = latest[latest["metric"] == "processed"].set_index("guarantee")
    gs = [g for g in GUARANTEES if g in rows.index]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=gs, y=[rows.loc[g, "truth"] for g in gs], name="truth at its committed offsets",
                         marker_color=TRUTH_COLOR, opacity=0.55,
                         text=[f"{int(rows.loc[g, 'truth']):,}" for g in gs], textposition="outside",
                         hovertemplate="%{x}: truth %{y:,}<extra></extra>"))
    fig.add_trace(go.Bar(x=gs, y=[rows.loc[g, "observed"] for g in gs], name="counted by its sink",
                         marker_color=[GUARANTEE_COLORS[g] for g in gs],
                         text=[f"{int(rows.loc[g, 'observed']):,}" for g in gs], textposition="outside",
                         hovertemplate="%{x}: counted %{y:,}<extra></extra>"))
    fig.update_layout(barmode="group", bargap=0.3)
    fig = _layout(fig, "Count per guarantee vs truth (newest audit)", y_title="transactions")
    fig.update_layout(hovermode="closest", margin=dict(t=50),
                      legend=dict(orientation="h", yanchor="top", y=-0.12, xanchor="left", x=0))
    top = float(max(rows["truth"].max(), rows["observed"].max())) if gs else 1.0
    fig.update_yaxes(range=[0, top * 1.15], tickformat=",~r")
    return fig


def _mark_faults(fig: go.Figure, faults: pd.DataFrame, rows: int = 1) -> None:
    """A dotted line across every panel at each fault, labelled once at the top."""
    for f in faults.itertuples():
        for row in range(1, rows + 1):
            fig.add_vline(x=f.time, line=dict(color="#444", dash="dot", width=1.5), row=row, col=1)
        fig.add_annotation(x=f.time, y=1, yref="paper", text=f"{f.kind} ({f.job or 'broker'})", showarrow=False,
                           textangle=-90, xanchor="right", yanchor="top", font=dict(size=11, color="#444"))


def guarantee_error(series: pd.DataFrame, faults: pd.DataFrame) -> go.Figure:
    """The audit's lost and duplicated over time per guarantee (lag is not in them), faults marked."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=("lost: input below the committed offsets missing from the sink",
                                        "duplicated: replayed + upstream"))
    fig.update_annotations(x=0, xanchor="left", font=dict(size=12, color="#555"))
    for g in GUARANTEES:
        part = series[series["guarantee"] == g]
        if part.empty:
            continue
        for row, column in ((1, "lost"), (2, "duplicated")):
            fig.add_trace(go.Scatter(x=part["time"], y=part[column].fillna(0), name=g, legendgroup=g,
                                     showlegend=row == 1, mode="lines",
                                     line=dict(color=GUARANTEE_COLORS[g], width=3 if g == "exactly-once" else 2,
                                               shape="hv"),
                                     hovertemplate=f"{g}: %{{y:,}} {column}<extra></extra>"), row=row, col=1)
    _mark_faults(fig, faults, rows=2)
    for row, column in ((1, "lost"), (2, "duplicated")):
        fig.update_yaxes(title_text="records", row=row, col=1)
        _counts_axis(fig, series[column].max() if not series.empty else 0, row=row, col=1)
    _time_axis(fig, pd.concat([series["time"], faults["time"]]) if not faults.empty else series["time"],
               row=2, col=1)
    fig.update_xaxes(tickformat="%H:%M:%S", row=1, col=1)
    fig = _layout(fig, "Lost and duplicated over time, from the audit", height=480)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.16, xanchor="left", x=0), margin=dict(t=60))
    return fig


def lag(series: pd.DataFrame) -> go.Figure:
    """How far each query is behind its input (records beyond its committed offsets)."""
    fig = go.Figure()
    for g in GUARANTEES:
        part = series[series["guarantee"] == g]
        if part.empty:
            continue
        fig.add_trace(go.Scatter(x=part["time"], y=part["lag_records"].fillna(0), name=g, mode="lines",
                                 line=dict(color=GUARANTEE_COLORS[g], width=2), customdata=part["lag_seconds"],
                                 hovertemplate=f"{g}: %{{y:,}} records (%{{customdata:.1f}} s)<extra></extra>"))
    _time_axis(fig, series["time"])
    _counts_axis(fig, series["lag_records"].max() if not series.empty else 0)
    return _layout(fig, "Behind the input: records beyond the committed offsets (not lost)", height=300,
                   y_title="records behind")


# --- faults ---------------------------------------------------------------------------------------

RECOVERY_PHASES = (("to_lease_s", "to the lease (noticed; standby promoted or new driver up)"),
                   ("to_batch_s", "to the first batch (sinks, queries started, trigger)"),
                   ("batch_s", "first batch (state loaded, committed)"))


def recoveries(df: pd.DataFrame) -> go.Figure:
    """One stacked bar per recovery, labelled job · how · fault · time: where its seconds went
    (kill -> lease -> first batch started -> committed); a recovery recorded without them is one
    grey block."""
    fig = go.Figure()
    df = df.sort_values("killed")
    labels = df["job"] + " · " + df["via"] + " · " + df["fault"] + " · " + df["killed"].dt.strftime("%H:%M:%S")
    broken_down = df["to_lease_s"].notna()  # the phases of a recovery are told together or not at all
    told = pd.Series(0.0, index=df.index)
    for i, (col, name) in enumerate(RECOVERY_PHASES):
        values = pd.to_numeric(df[col], errors="coerce").where(broken_down)
        told += values.fillna(0.0)
        fig.add_trace(go.Bar(x=labels, y=values, name=name, marker_color=SERIES[i],
                             hovertemplate="%{y:.1f} s<extra>" + name.split(" (")[0] + "</extra>"))
    untold = (df["seconds"] - told).where(told == 0)
    if untold.notna().any():
        fig.add_trace(go.Bar(x=labels, y=untold, name="not broken down", marker_color="#9AA5AB",
                             hovertemplate="%{y:.1f} s<extra>not broken down</extra>"))
    fig.add_trace(go.Scatter(x=labels, y=df["seconds"], mode="text", text=df["seconds"].map("{:.1f} s".format),
                             textposition="top center", showlegend=False, hoverinfo="skip"))
    fig.update_xaxes(type="category", title_text="job · how · fault · killed at (UTC)", categoryorder="array",
                     categoryarray=list(labels))
    fig.update_yaxes(rangemode="tozero", range=[0, float(df["seconds"].max()) * 1.25 if not df.empty else 1])
    fig.update_layout(barmode="stack", bargap=0.5 if len(df) > 2 else 0.7)
    fig = _layout(fig, "Recovery time per fault (kill → first new batch with rows) and where it went",
                  height=360, y_title="recovery (s)")
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.35, xanchor="left", x=0))
    return fig


def stages(df: pd.DataFrame) -> go.Figure:
    """One stacked bar per batch: where its trigger's time went (pipelines.engine.stages.STAGES)."""
    fig = go.Figure()
    labels = df["batch_id"].map("{:d}".format)
    for i, (col, name) in enumerate(STAGES):
        fig.add_trace(go.Bar(x=labels, y=df[col] / 1000, name=name, marker_color=(SERIES + ["#9AA5AB"])[i],
                             hovertemplate="%{y:.2f} s<extra>" + name + "</extra>"))
    fig.update_xaxes(type="category", title_text="batch")
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(barmode="stack", bargap=0.2)
    fig = _layout(fig, "Where each fraud batch's time goes", height=380, y_title="seconds")
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.25, xanchor="left", x=0))
    return fig


# --- windows --------------------------------------------------------------------------------------

def windows(df: pd.DataFrame, kind: str) -> go.Figure:
    """Processed and fraud per window start, summed over keys."""
    per = df.groupby("start")[["processed", "fraud"]].sum().reset_index().sort_values("start")
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=per["start"], y=per["processed"], name="transactions", marker_color="#3A6EA5",
                         width=_lone_bar_width(per["start"], float((df["window_end"] - df["window_start"]).max())),
                         opacity=0.8, hovertemplate="%{y:,} transactions<extra></extra>"), secondary_y=False)
    fig.add_trace(go.Scatter(x=per["start"], y=per["fraud"], name="fraud", mode="lines+markers",
                             line=dict(color=GUARANTEE_COLORS["at-most-once"], width=2),
                             hovertemplate="%{y:,} fraud<extra></extra>"), secondary_y=True)
    fig.update_yaxes(title_text="transactions per window", tickformat=",~r", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="fraud per window", secondary_y=True, rangemode="tozero", tickformat=",d",
                     showgrid=False)
    _time_axis(fig, per["start"], title="window start (UTC)")
    return _layout(fig, f"{kind.capitalize()} windows: transactions per window")


def sessions(df: pd.DataFrame, top: int = 25) -> go.Figure:
    """The newest sessions as bars from start to end, one row per key."""
    part = df.sort_values("window_start", ascending=False).head(top).sort_values("window_start")
    fig = go.Figure(go.Bar(
        base=part["start"], x=(part["window_end"] - part["window_start"]), y=part["key"], orientation="h",
        marker=dict(color=part["processed"], colorscale="Blues", showscale=True,
                    colorbar=dict(title="transactions")),
        customdata=part[["processed", "fraud", "length_s"]],
        hovertemplate="%{y}: %{customdata[0]:,} transactions, %{customdata[1]:,} fraud, "
                      "%{customdata[2]:,.0f} s<extra></extra>"))
    fig.update_xaxes(type="date", tickformat="%H:%M:%S", title_text=TIME_TITLE)
    fig.update_yaxes(title_text="card")
    fig = _layout(fig, f"Session windows: the newest {len(part)} of {len(df):,} sessions",
                  height=max(300, 22 * len(part) + 120))
    fig.update_layout(hovermode="closest")
    return fig


def late(series: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    for i, (kind, part) in enumerate(series.groupby("kind")):
        fig.add_trace(go.Bar(x=part["start"], y=part["count"], name=kind, marker_color=SERIES[i % len(SERIES)],
                             hovertemplate=f"{kind}: %{{y:,}} late events<extra></extra>"))
    fig.update_layout(barmode="stack")
    _time_axis(fig, series["start"], title="window start (UTC)")
    _counts_axis(fig)
    return _layout(fig, "Late events counted apart, by the window they were late for", height=300,
                   y_title="late events")


# --- checkpoints ----------------------------------------------------------------------------------

def per_query(df: pd.DataFrame, column: str, title: str, y_title: str, height: int = 330,
              mode: str = "lines") -> go.Figure:
    """One line per query; past MAX_POINTS a query's, each point the longest of its bin's batches."""
    df, seconds = binned(df, {column: "max"}, by="query")
    title += per_bin(seconds, "the longest")
    fig = go.Figure()
    for i, (query, part) in enumerate(df.groupby("query")):
        fig.add_trace(go.Scatter(x=part["time"], y=part[column], name=query, mode=mode,
                                 line=dict(color=_query_color(query, i), width=2),
                                 hovertemplate=f"{query}: %{{y:,}}<extra></extra>"))
    _time_axis(fig, df["time"])
    fig.update_yaxes(rangemode="tozero", tickformat=",~r")
    return _legend_below(_layout(fig, title, height=height, y_title=y_title))


def state(df: pd.DataFrame) -> go.Figure:
    """State rows and state memory per query, stacked in two panels (past MAX_POINTS a query's, each
    point its bin's newest batch)."""
    df, seconds = binned(df, {"state_rows": "last", "state_memory_bytes": "last"}, by="query")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=("state rows", "state memory"))
    for i, (query, part) in enumerate(df.groupby("query")):
        color = _query_color(query, i)
        fig.add_trace(go.Scatter(x=part["time"], y=part["state_rows"], name=query, legendgroup=query,
                                 line=dict(color=color, width=2), hovertemplate=f"{query}: %{{y:,}} rows<extra></extra>"),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=part["time"], y=part["state_memory_bytes"] / 2**20, name=query,
                                 legendgroup=query, showlegend=False, line=dict(color=color, width=2),
                                 hovertemplate=f"{query}: %{{y:,.1f}} MiB<extra></extra>"), row=2, col=1)
    fig.update_yaxes(title_text="rows", tickformat=",~r", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="MiB", rangemode="tozero", row=2, col=1)
    _time_axis(fig, df["time"], row=2, col=1)
    fig.update_xaxes(tickformat="%H:%M:%S", row=1, col=1)
    return _legend_below(_layout(fig, "State held by each query" + per_bin(seconds, "the newest"), height=500))


def query_health(part: pd.DataFrame, query: str) -> go.Figure:
    """One query over time, four panels: input rate against processed rate (processed below input
    is backpressure: the query falls behind), the watermark's gap to the newest event, state rows
    removed and dropped late, and commit (checkpoint) duration. Past MAX_POINTS batches, in bins of
    time: the rates their mean, the gap and the commit their longest, the rows their sum."""
    part, seconds = binned(part, {"input_rows_per_s": "mean", "processed_rows_per_s": "mean", "watermark_gap_s": "max",
                                  "state_rows_removed": "sum", "state_rows_dropped_late": "sum", "commit_ms": "max"})
    has_gap = part["watermark_gap_s"].notna().any()
    fig = make_subplots(rows=2, cols=2, shared_xaxes=True, vertical_spacing=0.16, horizontal_spacing=0.1,
                        subplot_titles=("input vs processed rate",
                                        "watermark gap to newest event" if has_gap else "no watermark",
                                        "state rows removed, dropped late",
                                        "commit duration"))
    fig.update_annotations(font=dict(size=12, color="#555"))
    color = _query_color(query, 0)
    fig.add_trace(go.Scatter(x=part["time"], y=part["input_rows_per_s"], name="input rows/s", mode="lines",
                             line=dict(color="#5C6B73", width=2, dash="dot"),
                             hovertemplate="input %{y:,.0f} rows/s<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=part["time"], y=part["processed_rows_per_s"], name="processed rows/s", mode="lines",
                             line=dict(color=color, width=2),
                             hovertemplate="processed %{y:,.0f} rows/s<extra></extra>"), row=1, col=1)
    fig.update_yaxes(title_text="rows/s", rangemode="tozero", tickformat=",~r", row=1, col=1)
    if has_gap:
        fig.add_trace(go.Scatter(x=part["time"], y=part["watermark_gap_s"], name="watermark gap", mode="lines",
                                 line=dict(color="#8E6C8A", width=2), showlegend=False,
                                 hovertemplate="gap %{y:,.1f} s<extra></extra>"), row=1, col=2)
    fig.update_yaxes(title_text="gap (s)", rangemode="tozero", row=1, col=2)
    fig.add_trace(go.Bar(x=part["time"], y=part["state_rows_removed"].fillna(0), name="removed from state",
                         marker_color="#2E8B57", hovertemplate="%{y:,} rows removed<extra></extra>"), row=2, col=1)
    fig.add_trace(go.Bar(x=part["time"], y=part["state_rows_dropped_late"].fillna(0), name="dropped late",
                         marker_color="#E4572E", hovertemplate="%{y:,} rows dropped late<extra></extra>"), row=2, col=1)
    fig.update_yaxes(title_text="rows", row=2, col=1)
    top = max(part["state_rows_removed"].fillna(0).max(), part["state_rows_dropped_late"].fillna(0).max()) \
        if not part.empty else 0
    _counts_axis(fig, top, row=2, col=1)
    fig.add_trace(go.Scatter(x=part["time"], y=part["commit_ms"], name="commit", mode="lines", showlegend=False,
                             line=dict(color="#3A6EA5", width=2), hovertemplate="commit %{y:,} ms<extra></extra>"),
                  row=2, col=2)
    fig.update_yaxes(title_text="duration (ms)", rangemode="tozero", tickformat=",~r", row=2, col=2)
    for col in (1, 2):
        _time_axis(fig, part["time"], row=2, col=col)
        fig.update_xaxes(tickformat="%H:%M:%S", row=1, col=col)
    fig.update_layout(barmode="group")
    title = f"{query}: rates, watermark, state eviction, commit" + per_bin(seconds, "batches")
    return _legend_below(_layout(fig, title, height=560))


def _query_color(query: str, i: int) -> str:
    for g, color in GUARANTEE_COLORS.items():
        if g in query:
            return color
    return SERIES[i % len(SERIES)] if "fraud" not in query else "#3A6EA5"


PART_DASH = {"": "solid", "jvm": "dash", "pyworkers": "dot"}


def _role(process: str) -> tuple[str, str]:
    """("fraud-standby", "jvm") of "fraud-standby-jvm": the role (one colour) and the part (one dash)."""
    for part in ("jvm", "pyworkers"):
        if process.endswith(f"-{part}"):
            return process[:-len(part) - 1], part
    return process, ""


def process_memory(df: pd.DataFrame) -> go.Figure:
    """Resident memory of every long-lived process over time, one line each: a colour per role
    (fraud, usage, their standbys, the broker, ...), the Python driver solid, its Spark JVM dashed,
    its Spark Python workers dotted. Past MAX_POINTS samples a process's, each point its bin's newest."""
    df, seconds = binned(df, {"rss_mb": "last", "pid": "last"}, by="process")
    fig = go.Figure()
    roles = list(dict.fromkeys(_role(p)[0] for p in sorted(df["process"].unique())))
    for process, part in sorted(df.groupby("process"), key=lambda kv: _role(kv[0])):
        role, kind = _role(process)
        fig.add_trace(go.Scatter(x=part["time"], y=part["rss_mb"], name=process, mode="lines+markers",
                                 line=dict(color=SERIES[roles.index(role) % len(SERIES)], width=2,
                                           dash=PART_DASH[kind]), marker=dict(size=4),
                                 customdata=part["pid"],
                                 hovertemplate=f"{process}: %{{y:,.0f}} MB (pid %{{customdata}})<extra></extra>"))
    fig.update_yaxes(rangemode="tozero", tickformat=",~r")
    _time_axis(fig, df["time"])
    return _legend_below(_layout(fig, "Resident memory (RSS) per process" + per_bin(seconds, "the newest"),
                                 height=440, y_title="RSS (MB)"))


STORAGE_NAMES = {"store": "store (file + WAL)", "checkpoints": "checkpoints (logs + RocksDB state)",
                 "kafka": "broker data"}


def storage(df: pd.DataFrame) -> go.Figure:
    """Bytes on disk over time: the store, the checkpoint root, the local broker's data (past
    MAX_POINTS samples each, its bin's newest)."""
    df, seconds = binned(df, {"mib": "last"}, by="what")
    fig = go.Figure()
    for i, (what, part) in enumerate(df.groupby("what", sort=False)):
        name = STORAGE_NAMES.get(what, what)
        fig.add_trace(go.Scatter(x=part["time"], y=part["mib"], name=name, mode="lines+markers",
                                 line=dict(color=SERIES[i % len(SERIES)], width=2), marker=dict(size=4),
                                 hovertemplate=f"{name}: %{{y:,.1f}} MiB<extra></extra>"))
    fig.update_yaxes(rangemode="tozero", tickformat=",~r")
    _time_axis(fig, df["time"])
    return _legend_below(_layout(fig, "On disk: store, checkpoints, broker data" + per_bin(seconds, "the newest"),
                                 height=360, y_title="MiB"))


# --- fraud ----------------------------------------------------------------------------------------

def txn_labels(ids: pd.Series, width: int = 20) -> list[str]:
    """One row label per transaction: the id, or its tail when longer than `width` (ids share their
    run prefix, so a cut head would give every row the same label and the heatmap one row)."""
    ids = ids.astype(str)
    tails = [t if len(t) <= width else "…" + t[-(width - 1):] for t in ids]
    return tails if len(set(tails)) == len(tails) else list(ids)


def scores(flagged: pd.DataFrame, top: int = 20) -> go.Figure:
    """Per-analyzer scores of the newest flagged transactions, as a heatmap."""
    part = flagged.head(top).iloc[::-1]
    cols = [f"score_{a}" for a in ANALYZERS] + ["score"]
    labels = [a.replace("_", " ") for a in ANALYZERS] + ["combined"]
    z = part[cols].astype(float).to_numpy()
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=txn_labels(part["txn_id"]), colorscale="YlOrRd",
                               zmin=0, zmax=1, text=[[f"{v:.2f}" for v in row] for row in z],
                               texttemplate="%{text}", colorbar=dict(title="score (0–1)"),
                               hovertemplate="%{y} · %{x}: %{z:.2f}<extra></extra>"))
    fig.update_xaxes(title_text="analyzer", side="bottom")
    fig.update_yaxes(title_text="transaction", type="category")
    shown = f"the newest {len(part)}" if len(part) > 1 else "the one"
    fig = _layout(fig, f"Scores of {shown} flagged transaction{'s' if len(part) > 1 else ''}",
                  height=max(320, 24 * len(part) + 130))
    fig.update_layout(hovermode="closest")
    return fig


def quality(series: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    for metric, color in (("precision", "#3A6EA5"), ("recall", "#29A19C")):
        part = series[series["metric"] == metric]
        fig.add_trace(go.Scatter(x=part["time"], y=part["value"], name=metric, mode="lines",
                                 line=dict(color=color, width=2), hovertemplate=f"{metric}: %{{y:.1%}}<extra></extra>"))
    fig.update_yaxes(range=[0, 1.05], tickformat=".0%")
    _time_axis(fig, series["time"])
    return _layout(fig, "Live precision and recall: the simulator's own patterns", height=320,
                   y_title="share of transactions")


# --- fraud: the two paths -------------------------------------------------------------------------

PATH_COLORS = {"real-time": "#E4572E", "stateful": "#3A6EA5"}


def fraud_paths(series: pd.DataFrame, faults: pd.DataFrame, bucket_s: float = 5.0) -> go.Figure:
    """Per path and slice of arrival time: undecided transactions (top) and latency p99 (bottom,
    log scale: ms for the real-time path, seconds for the stateful one), every fault marked."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=(f"undecided: arrived, no decision (per {bucket_s:g} s of arrival)",
                                        "latency p99: decision appended − transaction appended"))
    fig.update_annotations(x=0, xanchor="left", font=dict(size=12, color="#555"))
    for path, color in PATH_COLORS.items():
        part = series[series["path"] == path]
        if part.empty:
            continue
        fig.add_trace(go.Bar(x=part["time"], y=part["undecided"], name=path, legendgroup=path, marker_color=color,
                             width=_lone_bar_width(series["time"], bucket_s * 1000),
                             hovertemplate=f"{path}: %{{y:,}} undecided<extra></extra>"), row=1, col=1)
        fig.add_trace(go.Scatter(x=part["time"], y=part["p99_ms"], name=path, legendgroup=path, showlegend=False,
                                 mode="lines", line=dict(color=color, width=2, shape="hv"),
                                 hovertemplate=f"{path}: p99 %{{y:,}} ms<extra></extra>"), row=2, col=1)
    _mark_faults(fig, faults, rows=2)
    fig.update_yaxes(title_text="transactions", row=1, col=1)
    _counts_axis(fig, series["undecided"].max() if not series.empty else 0, row=1, col=1)
    fig.update_yaxes(title_text="ms", type="log", row=2, col=1)
    p99 = series["p99_ms"].dropna() if "p99_ms" in series else pd.Series(dtype=float)
    if not p99.empty and p99.min() > 0 and p99.max() >= 10 * p99.min():
        fig.update_yaxes(dtick=1, row=2, col=1)  # decades apart: powers of ten alone, no 2s and 5s
    _time_axis(fig, pd.concat([series["time"], faults["time"]]) if not faults.empty else series["time"], row=2, col=1)
    fig.update_xaxes(tickformat="%H:%M:%S", row=1, col=1)
    fig = _layout(fig, "The two paths: what each left undecided, and how fast it decided", height=480)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.16, xanchor="left", x=0), margin=dict(t=60),
                      barmode="group")
    return fig


# --- model ----------------------------------------------------------------------------------------

METRIC_COLORS = {"auc_roc": "#3A6EA5", "average_precision": "#29A19C", "card_precision_at_100": "#E4572E"}
VERSION_COLORS = ["#5C6B73", "#3A6EA5", "#29A19C", "#F3A712", "#8E6C8A", "#E4572E", "#2E8B57", "#B5651D"]


def version_color(version: int) -> str:
    """The rules grey, each learned version a colour of its own (the same on every model chart)."""
    return VERSION_COLORS[0] if int(version) == 0 else VERSION_COLORS[1 + (int(version) - 1) % (len(VERSION_COLORS) - 1)]


def model_validation(cands: pd.DataFrame, metrics: dict[str, str]) -> go.Figure:
    """Each version's validation figures per candidate kind it tried (dashboard.data.model.candidates):
    one panel per metric, a bar per version and kind, the kind it chose outlined."""
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=list(metrics.values()), shared_yaxes=True,
                        horizontal_spacing=0.04)
    fig.update_annotations(font=dict(size=12, color="#555"))
    kinds = list(dict.fromkeys(cands["kind"]))
    colors = dict(zip(kinds, SERIES[1:] + SERIES[:1]))
    for i, metric in enumerate(metrics, start=1):
        part = cands[cands["metric"] == metric]
        for kind in kinds:
            mine = part[part["kind"] == kind]
            fig.add_trace(go.Bar(
                x=[f"v{v}" for v in mine["version"]], y=mine["value"], name=kind, legendgroup=kind,
                showlegend=i == 1, marker=dict(color=colors[kind],
                                               line=dict(color=["#222" if c else "rgba(0,0,0,0)" for c in mine["chosen"]],
                                                         width=2)),
                # the chosen kind's figure written above its bar (all of them would overlap)
                text=[f"✔ {v:.3f}" if c and not pd.isna(v) else "" for v, c in zip(mine["value"], mine["chosen"])],
                textposition="outside", textfont=dict(size=11), cliponaxis=False,
                hovertemplate=f"%{{x}} · {kind}: %{{y:.3f}}<extra>{metrics[metric]}</extra>"), row=1, col=i)
        fig.update_xaxes(type="category", title_text="version", row=1, col=i)
    fig.update_yaxes(range=[0, 1.12], title_text="on the validation period", row=1, col=1)
    fig = _layout(fig, "Validation: each kind tried per version (✔ outlined: the one refitted and saved)", height=380)
    fig.update_layout(barmode="group", hovermode="closest")
    return _legend_below(fig)


def training_windows(models: pd.DataFrame) -> go.Figure:
    """Per version: its training window, the validation period its kind and threshold were chosen
    on, and the moment its labels were cut (labels known by then only)."""
    fig = go.Figure()

    def days(text):  # "2018-07-25..2018-07-31" -> (first day, the day after the last)
        first, _, last = str(text or "").partition("..")
        try:
            return pd.Timestamp(first), pd.Timestamp(last or first) + pd.Timedelta(days=1)
        except ValueError:
            return None

    shown = set()
    for m in models.itertuples():
        y = f"v{m.version} · {m.kind}"
        # the training window wide, the validation period's two parts thin over it: the handbook's
        # validation scores the last days of the training window, so they overlap
        spans = [("training window", days(f"{m.train_from}..{m.train_to}"), "#29A19C", 18),
                 ("validation: fitted on", days(m.validation_train), "#B8C7D6", 6),
                 ("validation: scored on", days(m.validation_test), "#3A6EA5", 6)]
        for label, span, color, width in spans:
            if span is None:
                continue
            fig.add_trace(go.Scatter(x=list(span), y=[y, y], mode="lines", line=dict(color=color, width=width),
                                     name=label, legendgroup=label, showlegend=label not in shown,
                                     hovertemplate=f"{label}: {span[0]:%Y-%m-%d} – "
                                                   f"{span[1] - pd.Timedelta(days=1):%Y-%m-%d}<extra>{y}</extra>"))
            shown.add(label)
        as_of = pd.to_datetime(m.as_of, errors="coerce")
        if not pd.isna(as_of):
            fig.add_trace(go.Scatter(x=[as_of], y=[y], mode="markers", name="labels known by",
                                     legendgroup="as_of", showlegend="as_of" not in shown,
                                     marker=dict(symbol="line-ns-open", size=22, color=GOAL_COLOR, line=dict(width=3)),
                                     hovertemplate=f"labels known by {as_of:%Y-%m-%d %H:%M}<extra>{y}</extra>"))
            shown.add("as_of")
    fig.update_xaxes(type="date", tickformat="%Y-%m-%d", title_text="event time (UTC days)")
    fig.update_yaxes(type="category", autorange="reversed")
    fig = _layout(fig, "Training windows: what each version learned from, and when its labels were cut",
                  height=max(260, 50 * len(models) + 190))
    fig.update_layout(hovermode="closest", margin=dict(t=90))
    return fig


def precision_recall(curves: pd.DataFrame, names: dict[int, str]) -> go.Figure:
    """Precision against recall of "score ≥ threshold" per model version, on the labelled traffic."""
    fig = go.Figure()
    for version, part in curves.groupby("model_version", sort=True):
        fig.add_trace(go.Scatter(x=part["recall"], y=part["precision"], mode="lines", line_shape="hv",
                                 name=names.get(int(version), f"model {version}"),
                                 line=dict(color=version_color(version), width=2),
                                 hovertemplate="recall %{x:.1%} · precision %{y:.1%}<extra></extra>"))
    fig.update_xaxes(range=[0, 1.02], tickformat=".0%", title_text="recall (frauds flagged)")
    fig.update_yaxes(range=[0, 1.05], tickformat=".0%", title_text="precision (alarms right)")
    fig = _layout(fig, "Precision–recall on the traffic labelled so far", height=360)
    fig.update_layout(hovermode="closest")
    return fig


def card_precision_days(daily: pd.DataFrame, names: dict[int, str], k: int = 100) -> go.Figure:
    """The handbook's card precision@k per day and model version (bars), on the labelled traffic."""
    fig = go.Figure()
    for version, part in daily.groupby("model_version", sort=True):
        fig.add_trace(go.Bar(x=part["day"], y=part["precision"], name=names.get(int(version), f"model {version}"),
                             marker_color=version_color(version),
                             customdata=np.c_[part["compromised"], part["cards"]],
                             hovertemplate=(f"%{{x|%Y-%m-%d}}: %{{y:.2f}} (compromised cards in play "
                                            f"%{{customdata[0]:,}} of %{{customdata[1]:,}})<extra></extra>")))
    fig.update_xaxes(type="date", tickformat="%Y-%m-%d", dtick=86_400_000, title_text="day of event time (UTC)")
    fig.update_yaxes(range=[0, 1.05], title_text=f"compromised of the day's top {k} cards")
    fig = _layout(fig, f"Card precision@{k} per day, on the traffic labelled so far", height=360)
    fig.update_layout(barmode="group", hovermode="closest")
    return fig


def separation(df: pd.DataFrame) -> go.Figure:
    """AUC ROC of each score alone on the labelled traffic (0.5: no better than chance)."""
    part = df.dropna(subset=["auc_roc"])
    fig = go.Figure(go.Bar(x=part["auc_roc"], y=part["input"], orientation="h", marker_color="#3A6EA5",
                           text=[f"{v:.3f}" for v in part["auc_roc"]], textposition="outside", cliponaxis=False,
                           hovertemplate="%{y}: AUC ROC %{x:.3f}<extra></extra>"))
    fig.add_vline(x=0.5, line=dict(color=TRUTH_COLOR, dash="dot"), annotation_text="chance",
                  annotation_position="top")
    fig.update_xaxes(range=[0, 1.1], title_text="AUC ROC of the score alone")
    fig.update_yaxes(type="category", autorange="reversed")
    fig = _layout(fig, "How well each score the store holds separates the labelled traffic alone", height=300)
    fig.update_layout(hovermode="closest")
    return fig


def reasons(df: pd.DataFrame, names: dict[int, str], words) -> go.Figure:
    """Per feature, its mean share of the flagged decisions' explanations, a bar per model version
    (`words(feature)`: the feature said in words)."""
    fig = go.Figure()
    order = df.groupby("feature")["share"].max().sort_values(ascending=False).index.tolist()
    for version, part in df.groupby("model_version", sort=True):
        part = part.set_index("feature").reindex(order).dropna(subset=["share"]).reset_index()
        fig.add_trace(go.Bar(
            x=part["share"], y=[words(f) for f in part["feature"]], orientation="h",
            name=names.get(int(version), f"model {version}"), marker_color=version_color(version),
            customdata=np.c_[part["in_top"], part["explained"]],
            hovertemplate=("%{y}: %{x:.0%} of the explanation on average; among the three reasons of "
                           "%{customdata[0]:,} of %{customdata[1]:,} flagged decisions<extra></extra>")))
    fig.update_xaxes(tickformat=".0%", rangemode="tozero", title_text="mean share of a flagged decision's explanation")
    fig.update_yaxes(type="category", autorange="reversed")
    fig = _layout(fig, "What moved the flagged decisions' scores (each decision's three largest contributions)",
                  height=max(300, 26 * len(order) * max(1, df["model_version"].nunique()) + 150))
    fig.update_layout(barmode="group", hovermode="closest")
    return fig
