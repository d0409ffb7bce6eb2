"""The benches' figures, shown by the Overview and the Fraud page: latency end to end per path and
fraud quality on the evaluation set, each as the store's newest recorded run (never computed here)."""
import streamlit as st

from dashboard import ui
from dashboard.data import quality


def draw(db):
    """The benches' figures: latency end to end per path, fraud quality on the evaluation set."""
    st.subheader("Measured by the benches")
    left, right = st.columns(2)
    with left:
        runs = quality.latency_runs(db)
        if runs.empty:
            ui.no_data("no latency measured yet — run `python -m bench latency --mode microbatch|realtime`.")
        else:
            st.dataframe(runs[["path", "rate", "p50_ms", "p95_ms", "p99_ms", "max_ms", "undecided", "measured_at"]],
                         hide_index=True, width="stretch",
                         column_config={"rate": st.column_config.NumberColumn("tx/s", format="%d"),
                                        "p50_ms": st.column_config.NumberColumn("p50 ms", format="%d"),
                                        "p95_ms": st.column_config.NumberColumn("p95 ms", format="%d"),
                                        "p99_ms": st.column_config.NumberColumn("p99 ms", format="%d"),
                                        "max_ms": st.column_config.NumberColumn("max ms", format="%d"),
                                        "undecided": st.column_config.NumberColumn(format="%d"),
                                        "measured_at": st.column_config.DatetimeColumn("measured")})
            st.caption("`bench latency`: the decision's Kafka append time minus the transaction's, one clock "
                       "(the broker's); the newest run per path and rate.")
    with right:
        rows, run = quality.latest_quality(db)
        if run is None:
            ui.no_data("no fraud quality measured yet — run `python -m bench quality`.")
        else:
            st.dataframe(rows, hide_index=True, width="stretch",
                         column_config={"transactions": st.column_config.NumberColumn(format="localized"),
                                        "flagged": st.column_config.NumberColumn(format="localized"),
                                        "precision": st.column_config.NumberColumn(format="%.3f"),
                                        "recall": st.column_config.NumberColumn(format="%.3f"),
                                        "average_precision": st.column_config.NumberColumn("avg precision", format="%.3f"),
                                        "flagged_share": st.column_config.NumberColumn("flagged share", format="%.3f")})
            st.caption(f"`bench quality` on {run['when']}: the real fraud job on the evaluation set "
                       f"(seed {run['seed']}, threshold {run['threshold']:g}), drawn by rules the analyzers were "
                       "not tuned on. Each fraud pattern is measured against every legitimate transaction; "
                       "for legitimate patterns, the share flagged.")
