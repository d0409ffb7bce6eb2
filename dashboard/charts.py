"""Plotly figure builders: DataFrames from dashboard.data in, figures out (no Streamlit, no store).

One look for every chart: white template, small margins, legend on top, one colour per guarantee
and per analyzer, kept the same on every page.
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from infra.contracts import ANALYZERS, GUARANTEES

GUARANTEE_COLORS = {"at-most-once": "#E4572E", "at-least-once": "#F3A712", "exactly-once": "#29A19C"}
TRUTH_COLOR = "#5C6B73"
GOAL_COLOR = "#C0392B"
SERIES = ["#3A6EA5", "#29A19C", "#F3A712", "#E4572E", "#8E6C8A", "#5C6B73", "#2E8B57", "#B5651D"]
ANALYZER_COLORS = dict(zip(ANALYZERS, ["#3A6EA5", "#8E6C8A", "#2E8B57"]))


def _layout(fig: go.Figure, title: str, height: int = 340, y_title: str | None = None) -> go.Figure:
    fig.update_layout(template="plotly_white", height=height, title=dict(text=title, x=0, font=dict(size=15)),
                      margin=dict(l=10, r=10, t=70, b=10),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1),
                      hovermode="x unified")
    if y_title:
        fig.update_yaxes(title_text=y_title)
    return fig


def latency(series: pd.DataFrame, goal_ms: float = 20) -> go.Figure:
    """Decision latency percentiles per time bucket against the goal line."""
    fig = go.Figure()
    for name, color in (("p50", "#29A19C"), ("p95", "#3A6EA5"), ("p99", "#8E6C8A")):
        fig.add_trace(go.Scatter(x=series["time"], y=series[name], name=name, mode="lines+markers",
                                 line=dict(color=color, width=2), marker=dict(size=4)))
    fig.add_hline(y=goal_ms, line=dict(color=GOAL_COLOR, dash="dash", width=2),
                  annotation_text=f"goal {goal_ms:g} ms", annotation_position="top left",
                  annotation_font_color=GOAL_COLOR)
    top = max([goal_ms * 1.3] + [float(series[c].max()) * 1.1 for c in ("p99",) if not series.empty])
    fig.update_yaxes(range=[0, top], rangemode="tozero")
    return _layout(fig, "Decision latency (decided_at − produced_at)", y_title="ms")


def throughput(series: pd.DataFrame) -> go.Figure:
    fig = go.Figure(go.Bar(x=series["time"], y=series["decisions_per_s"], name="decisions/s",
                           marker_color="#3A6EA5"))
    return _layout(fig, "Decisions per second", y_title="per second")


def counts_vs_truth(latest: pd.DataFrame) -> go.Figure:
    """Each guarantee's observed count next to the truth it should equal."""
    rows = latest[latest["metric"] == "processed"].set_index("guarantee")
    gs = [g for g in GUARANTEES if g in rows.index]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=gs, y=[rows.loc[g, "truth"] for g in gs], name="truth (distinct txn_ids in Kafka)",
                         marker_color=TRUTH_COLOR, opacity=0.55,
                         text=[f"{int(rows.loc[g, 'truth']):,}" for g in gs], textposition="outside"))
    fig.add_trace(go.Bar(x=gs, y=[rows.loc[g, "observed"] for g in gs], name="counted by the sink",
                         marker_color=[GUARANTEE_COLORS[g] for g in gs],
                         text=[f"{int(rows.loc[g, 'observed']):,}" for g in gs], textposition="outside"))
    fig.update_layout(barmode="group", bargap=0.3)
    fig.update_layout(hovermode="closest")
    fig = _layout(fig, "Usage count per guarantee vs truth", y_title="transactions")
    fig.update_layout(hovermode="closest", margin=dict(t=50),
                      legend=dict(orientation="h", yanchor="top", y=-0.12, xanchor="left", x=0))
    top = float(max(rows["truth"].max(), rows["observed"].max())) if gs else 1.0
    fig.update_yaxes(range=[0, top * 1.15])
    return fig


def guarantee_error(series: pd.DataFrame, faults: pd.DataFrame) -> go.Figure:
    """observed − truth over time per guarantee, each injected fault a dotted vertical line."""
    fig = go.Figure()
    for g in GUARANTEES:
        part = series[series["guarantee"] == g]
        if part.empty:
            continue
        fig.add_trace(go.Scatter(x=part["time"], y=part["error"], name=g, mode="lines",
                                 line=dict(color=GUARANTEE_COLORS[g], width=3 if g == "exactly-once" else 2,
                                           shape="hv")))
    fig.add_hline(y=0, line=dict(color=TRUTH_COLOR, width=1))
    for f in faults.itertuples():
        fig.add_vline(x=f.time, line=dict(color="#444", dash="dot", width=1.5))
        fig.add_annotation(x=f.time, y=1, yref="paper", text=f"{f.kind} ({f.job or 'broker'})", showarrow=False,
                           textangle=-90, xanchor="right", yanchor="top", font=dict(size=11, color="#444"))
    return _layout(fig, "Error over time: counted − truth (above 0: duplicates, below 0: lost)",
                   height=380, y_title="transactions")


def recoveries(df: pd.DataFrame) -> go.Figure:
    """One bar per recovery, labelled job · fault · time, coloured by fault."""
    fig = go.Figure()
    df = df.sort_values("killed")
    labels = df["job"] + " · " + df["fault"] + " · " + df["killed"].dt.strftime("%H:%M:%S")
    for i, fault in enumerate(df["fault"].unique()):
        mask = df["fault"] == fault
        fig.add_trace(go.Bar(x=labels[mask], y=df.loc[mask, "seconds"], name=fault,
                             marker_color=SERIES[i % len(SERIES)], text=df.loc[mask, "seconds"].map("{:.1f} s".format),
                             textposition="outside", hovertemplate="%{x}: %{y:.1f} s<extra></extra>"))
    fig.update_xaxes(type="category")
    fig.update_layout(bargap=0.5 if len(df) > 2 else 0.7)
    return _layout(fig, "Recovery time per fault (kill → first new committed batch)", height=300, y_title="seconds")


def windows(df: pd.DataFrame, kind: str) -> go.Figure:
    """Processed and fraud per window start, summed over keys."""
    per = df.groupby("start")[["processed", "fraud"]].sum().reset_index().sort_values("start")
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=per["start"], y=per["processed"], name="processed", marker_color="#3A6EA5",
                         opacity=0.8), secondary_y=False)
    fig.add_trace(go.Scatter(x=per["start"], y=per["fraud"], name="fraud", mode="lines+markers",
                             line=dict(color=GUARANTEE_COLORS["at-most-once"], width=2)), secondary_y=True)
    fig.update_yaxes(title_text="processed", secondary_y=False)
    fig.update_yaxes(title_text="fraud", secondary_y=True, rangemode="tozero", tickformat=",d", showgrid=False)
    return _layout(fig, f"{kind.capitalize()} windows: transactions per window (by window start)")


def sessions(df: pd.DataFrame, top: int = 25) -> go.Figure:
    """The newest sessions as bars from start to end, one row per key."""
    part = df.sort_values("window_start", ascending=False).head(top).sort_values("window_start")
    fig = go.Figure(go.Bar(
        base=part["start"], x=(part["window_end"] - part["window_start"]), y=part["key"], orientation="h",
        marker=dict(color=part["processed"], colorscale="Blues", showscale=True,
                    colorbar=dict(title="txns")),
        customdata=part[["processed", "fraud", "length_s"]],
        hovertemplate="%{y}: %{customdata[0]} txns, %{customdata[1]} fraud, %{customdata[2]:.0f} s<extra></extra>"))
    fig.update_xaxes(type="date")
    fig = _layout(fig, f"Session windows: the newest {len(part)} sessions", height=max(300, 22 * len(part) + 100))
    fig.update_layout(hovermode="closest")
    return fig


def late(series: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    for i, (kind, part) in enumerate(series.groupby("kind")):
        fig.add_trace(go.Bar(x=part["start"], y=part["count"], name=kind, marker_color=SERIES[i % len(SERIES)]))
    fig.update_layout(barmode="stack")
    return _layout(fig, "Late events dropped, by the window they were late for", height=300, y_title="events")


def _legend_below(fig: go.Figure) -> go.Figure:
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.24, xanchor="left", x=0),
                      margin=dict(t=45))
    return fig


def per_query(df: pd.DataFrame, column: str, title: str, y_title: str, height: int = 330,
              mode: str = "lines") -> go.Figure:
    fig = go.Figure()
    for i, (query, part) in enumerate(df.groupby("query")):
        fig.add_trace(go.Scatter(x=part["time"], y=part[column], name=query, mode=mode,
                                 line=dict(color=_query_color(query, i), width=2)))
    return _legend_below(_layout(fig, title, height=height, y_title=y_title))


def state(df: pd.DataFrame) -> go.Figure:
    """State rows and state memory per query, stacked in two panels."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("state rows", "state memory (MiB)"))
    for i, (query, part) in enumerate(df.groupby("query")):
        color = _query_color(query, i)
        fig.add_trace(go.Scatter(x=part["time"], y=part["state_rows"], name=query, legendgroup=query,
                                 line=dict(color=color, width=2)), row=1, col=1)
        fig.add_trace(go.Scatter(x=part["time"], y=part["state_memory_bytes"] / 2**20, name=query,
                                 legendgroup=query, showlegend=False, line=dict(color=color, width=2)),
                      row=2, col=1)
    return _legend_below(_layout(fig, "State held by each query", height=480))


def _query_color(query: str, i: int) -> str:
    for g, color in GUARANTEE_COLORS.items():
        if g in query:
            return color
    return SERIES[i % len(SERIES)] if "fraud" not in query else "#3A6EA5"


def scores(flagged: pd.DataFrame, top: int = 20) -> go.Figure:
    """Per-analyzer scores of the newest flagged transactions, as a heatmap."""
    part = flagged.head(top).iloc[::-1]
    cols = [f"score_{a}" for a in ANALYZERS] + ["score"]
    labels = list(ANALYZERS) + ["combined"]
    z = part[cols].astype(float).to_numpy()
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=part["txn_id"].str.slice(0, 14), colorscale="YlOrRd",
                               zmin=0, zmax=1, text=[[f"{v:.2f}" for v in row] for row in z],
                               texttemplate="%{text}", colorbar=dict(title="score")))
    fig = _layout(fig, f"Scores of the newest {len(part)} flagged transactions", height=max(320, 24 * len(part) + 110))
    fig.update_layout(hovermode="closest")
    return fig


def quality(series: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    for metric, color in (("precision", "#3A6EA5"), ("recall", "#29A19C")):
        part = series[series["metric"] == metric]
        fig.add_trace(go.Scatter(x=part["time"], y=part["value"], name=metric, mode="lines",
                                 line=dict(color=color, width=2)))
    fig.update_yaxes(range=[0, 1.05], tickformat=".0%")
    return _layout(fig, "Precision and recall against the labels", height=300)
