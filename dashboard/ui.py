"""Streamlit glue shared by the pages: settings, the store guard, the broker probe and its badge, the
token gate.

Every page draws through `live(draw)`: it opens a short store connection, calls `draw(db, s)` and
turns the failures a user can meet (store busy, broker down, no data) into sentences instead of
tracebacks.
"""
from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

import streamlit as st

from dashboard import auth
from dashboard.data import kafka
from dashboard.data.store import open_store
from infra.config import Settings, load


def settings() -> Settings:
    return load()


def refresh_seconds() -> float:
    return max(0.5, settings().dashboard_refresh_seconds)


def draw_with_store(draw) -> None:
    """Run `draw(db, settings)` on a fresh store connection; say what went wrong, never a traceback."""
    s = settings()
    try:
        with open_store(s) as db:
            draw(db, s)
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            st.warning("Store busy: another process holds the store's lock right now "
                       f"({s.store_path.name}). The page retries on its next refresh.", icon=":material/hourglass_top:")
        else:
            st.error(f"The store at {s.store_path} could not be read: {exc}.")
    except kafka.BrokerDown as exc:
        st.warning(f"Kafka {exc}.", icon=":material/cloud_off:")
    except Exception as exc:  # a page must never show a traceback to its user
        st.error(f"This part of the page could not be drawn: {type(exc).__name__}: {exc}.")


def live(draw, every: float | None = None) -> None:
    """Draw now and again every `every` seconds (default `dashboard_refresh_seconds`, never more
    often), without rerunning the whole page."""
    @st.fragment(run_every=max(refresh_seconds(), every or 0))
    def _live():
        draw_with_store(draw)
    _live()


def refresh_sentence() -> str:
    """How often the pages and their charts are redrawn, as the sidebar says it."""
    every, charts = refresh_seconds(), settings().dashboard_chart_seconds
    if charts <= every:
        return f"Refresh every {every:g} s"
    return f"Refresh every {every:g} s; a chart with new data every {charts:g} s"


def sampled_every(sample_seconds: float) -> float:
    """How often to redraw a view of samples taken every `sample_seconds`: a new one shows within a
    sixth of that, and the page does not rebuild charts of data that cannot have changed."""
    return max(refresh_seconds(), sample_seconds / 6)


@dataclass(frozen=True)
class Drawn:
    """A chart as last sent to the browser: when, what it shows (`shows`), the figure."""
    at: float
    shows: tuple
    figure: object


def shows(figure) -> tuple:
    """What a figure shows apart from its data: its title and its traces' kinds and names. A chart
    whose `shows` changed (another query chosen, a new series) is drawn at once."""
    title = figure.layout.title.text if figure.layout.title else None
    return (title, tuple((t.type, getattr(t, "name", None)) for t in figure.data))


def redraw(last: Drawn | None, now: float, every: float, new_shows: tuple) -> bool:
    """Whether a chart gets its new figure now, or the one it was last sent again."""
    return last is None or every <= 0 or now - last.at >= every or last.shows != new_shows


def chart(figure, name: str, where=None) -> None:
    """`where.plotly_chart(figure)` (`where`: a column, default the page), sending the figure this
    chart (`name`, unique in the dashboard) was last sent again until DASHBOARD_CHART_SECONDS have
    passed, unless it now shows something else (`shows`). Why: Streamlit names a Plotly chart by its
    figure, so new data makes it a new element that the browser builds from scratch (an unchanged
    figure is left as it is), and on a loaded host a chart rebuilt at every refresh was blank much
    of the time (docs/dashboard.md)."""
    memo = st.session_state.setdefault("_charts_drawn", {})
    now = time.monotonic()
    last = memo.get(name)
    new_shows = shows(figure)
    if redraw(last, now, settings().dashboard_chart_seconds, new_shows):
        memo[name] = Drawn(now, new_shows, figure)
    else:
        figure = last.figure
    (where or st).plotly_chart(figure, width="stretch")


def no_data(what: str) -> None:
    st.info(f"No data yet: {what}", icon=":material/hourglass_empty:")


@st.cache_data(ttl=4, show_spinner=False)
def broker_probe(bootstrap: str) -> kafka.Probe:
    """What Kafka did when asked (`kafka.probe`: tried again before it says anything but "up");
    cached a few seconds, `bootstrap` keys the cache."""
    return kafka.probe(settings())


def broker_badge() -> None:
    """The sidebar's Kafka badge, redrawn on its own every few seconds (a page's fragments rerun
    without the sidebar, so a badge drawn once at the page's load would stay as it was then): green
    when a broker answers, amber when one takes connections but does not answer within the probe's
    timeout (busy or starting), red only when refused or unreachable or when the TLS handshake fails
    (a setting to fix), each said in words."""
    @st.fragment(run_every=max(5.0, refresh_seconds()))
    def _badge():
        s = settings()
        found = broker_probe(s.kafka_bootstrap)
        if found.up:
            st.success(f"Kafka up · {found.server}", icon=":material/check_circle:")
        elif found.down:
            st.error(f"Kafka broker down · {found.server} {found.says()}", icon=":material/cloud_off:")
        elif found.state == kafka.TLS_FAILED:  # a setting to fix, not a broker to wait for
            st.error(f"Kafka unusable · {found.server} {found.says()}", icon=":material/lock:")
        else:
            st.warning(f"Kafka not answering within {found.timeout_s:g} s · {found.server} {found.says()}",
                       icon=":material/hourglass_top:")
    _badge()


@st.cache_data(ttl=3, show_spinner=False)
def end_offsets(bootstrap: str, topics: tuple[str, ...], after_ts: int = 0) -> dict:
    """Kafka's end offsets, read after the newest batch `after_ts` names (a newer batch misses the
    cache): ends cached from before a batch committed would be behind that batch's own offsets."""
    return kafka.end_offsets(settings(), list(topics))


@st.cache_data(ttl=5, show_spinner=False)
def append_latencies(bootstrap: str, decisions_topic: str, transactions_topic: str) -> kafka.AppendLatencies:
    """The newest decisions of `decisions_topic` as (transaction appended, decision appended) on the
    broker's clock, as `bench latency` measures (cached a few seconds)."""
    return kafka.append_latencies(settings(), decisions_topic, transactions_topic)


@st.cache_data(ttl=5, show_spinner=False)
def rt_decisions(bootstrap: str, topic: str) -> list[dict]:
    """The newest real-time decisions of `topic` as their JSON (they live in Kafka only; cached a
    few seconds, `bootstrap` keys the cache)."""
    from dashboard.data.fraud import RT_ROWS, rt_decision

    return kafka.newest_records(settings(), topic, rt_decision, RT_ROWS)


@st.cache_data(ttl=30, show_spinner=False)
def recent_labels(bootstrap: str, topic: str) -> list[tuple[str, int]]:
    """(txn_id, is_fraud) of the newest labels in `topic` (cached half a minute: the Model page's
    curves need no fresher truth, and the read is the page's costliest)."""
    return kafka.recent_labels(settings(), topic)


def bound_host(s: Settings) -> str | None:
    """The address the server listens on: the server option when set, else DASHBOARD_HOST."""
    try:
        option = st.get_option("server.address")
    except Exception:
        option = None
    return option or s.dashboard_host


def token_field(key: str) -> str | None:
    """A password field for the dashboard token when the rule asks for one; the text entered."""
    s = settings()
    host = bound_host(s)
    if not auth.token_required(host, s.dashboard_token):
        return None
    if not s.dashboard_token:
        st.error(auth.check(None, host, None).reason, icon=":material/lock:")
        return None
    return st.text_input("Dashboard token", type="password", key=key,
                         help="DASHBOARD_TOKEN is set: buttons that change something need it.")


def authorized(given: str | None) -> bool:
    """Check a button press against the token rule; explain a refusal on the page."""
    s = settings()
    verdict = auth.THROTTLE.check(given, bound_host(s), s.dashboard_token)
    if not verdict.allowed:
        st.error(verdict.reason, icon=":material/lock:")
    return verdict.allowed
