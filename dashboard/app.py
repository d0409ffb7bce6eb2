"""CardStream's dashboard: `streamlit run dashboard/app.py` (bound to 127.0.0.1 by default).

The entry point only routes: it declares the pages (one module each under dashboard/views/, not
pages/: Streamlit serves a pages/ folder by itself too, and a page opened by its URL then came up
without this navigation), and draws what every page shares, the sidebar status of the broker and
the store. The dashboard reads what the pipelines write and writes nothing but commands.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `streamlit run dashboard/app.py` puts only dashboard/ on the path
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from dashboard import ui  # noqa: E402

st.set_page_config(page_title="CardStream", page_icon=":material/credit_card:", layout="wide")

PAGES = [
    st.Page("views/overview.py", title="Overview", icon=":material/monitoring:", default=True),
    st.Page("views/guarantees.py", title="Guarantees", icon=":material/verified:"),
    st.Page("views/faults.py", title="Faults", icon=":material/bolt:"),
    st.Page("views/windows.py", title="Windows", icon=":material/schedule:"),
    st.Page("views/checkpoints.py", title="Checkpoints & state", icon=":material/save:"),
    st.Page("views/fraud.py", title="Fraud", icon=":material/gpp_maybe:"),
    st.Page("views/model.py", title="Model", icon=":material/model_training:"),
    st.Page("views/controls.py", title="Controls", icon=":material/tune:"),
]

page = st.navigation(PAGES)

s = ui.settings()
with st.sidebar:
    st.markdown("### :material/credit_card: CardStream")
    st.caption("Live fraud and usage monitoring on Spark and Kafka")
    ui.broker_badge()
    st.caption(f"Store: `{s.store_path}`  \n{ui.refresh_sentence()}")

page.run()
