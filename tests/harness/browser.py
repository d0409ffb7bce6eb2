"""A real `streamlit run dashboard/app.py` and Debian's Chromium for the browser tests, and the one
check of a drawn page that both page walks use (a seeded store, and make demo's live stack)."""
from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest

from bench.harness.dashboard import CHROMIUM, CHROMIUM_ARGS, served

ROOT = Path(__file__).resolve().parents[2]  # the repository: this file is tests/harness/browser.py
SHOTS = ROOT / "docs" / "screenshots"
# url path of each page -> the name of its screenshot (docs/screenshots/<name>.png in the README)
PAGES = {"": "overview", "guarantees": "guarantees", "faults": "faults", "windows": "windows",
         "checkpoints": "checkpoints", "fraud": "fraud", "controls": "controls"}
# A page's load, and any other action or wait given no timeout of its own, on a loaded two-core host
# (the jobs, the broker and Streamlit beside it): Playwright's 30 s default for both was seen to run
# out on a machine 2.4x slower than the one the waits were set on (bench/RESULTS.md#test-suite)
NAVIGATION_TIMEOUT_MS = 120_000
ACTION_TIMEOUT_MS = 60_000


def streamlit(env: dict, log_path: Path):
    """Serve the dashboard on a free port with `env` (pages refreshed every 2 s, no token); a context
    yielding its base URL."""
    return served({"DASHBOARD_REFRESH_SECONDS": "2", **env}, log_path, unset=("DASHBOARD_TOKEN",))


class Chromium:
    """The launched browser; each page it opens waits up to NAVIGATION_TIMEOUT_MS for a load and
    ACTION_TIMEOUT_MS for an action or a wait given no timeout."""

    def __init__(self, browser):
        self.browser = browser

    def new_page(self, **options):
        page = self.browser.new_page(**options)
        page.set_default_timeout(ACTION_TIMEOUT_MS)
        page.set_default_navigation_timeout(NAVIGATION_TIMEOUT_MS)
        return page


@contextlib.contextmanager
def chromium():
    """A headless Chromium from Debian (`Chromium`); fails loudly (never skips) when it is not
    installed."""
    if not CHROMIUM.exists():
        pytest.fail(f"Chromium is missing at {CHROMIUM}: install it with infra/install-chromium.sh "
                    "(this test never skips).")
    # deferred: playwright only where a browser runs
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield Chromium(browser)
        finally:
            browser.close()


# What a reader must never see on a page (issue 19): a figure cut short, "nan" or "None", a count
# shown with ".0", a chart with nothing drawn and no sentence beside it saying why.
COUNT_WITH_POINT_ZERO = re.compile(r"^[\d,]+\.0$")
COUNT_NOUNS = ("records|transactions|decisions|batches|rows|messages|commands|events|letters|restarts|"
               "failures|cards|windows|runs")
POINT_ZERO_COUNT = re.compile(rf"\b\d[\d,]*\.0 (?:{COUNT_NOUNS})\b")
MISSING = re.compile(r"\b(?:nan|NaN|None)\b")
SAYS_EMPTY = re.compile(r"\b(?:no|none|nothing|empty|yet|not|without)\b", re.IGNORECASE)

# Per metric: its text, and whether the browser cut it (text-overflow hides the rest, and adds "…").
METRICS_JS = """els => els.map(el => ({
    text: el.innerText.trim(),
    cut: [el, ...el.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1)}))"""
# Per Plotly chart: the points its visible traces draw, its title, and the text just before and after
# it on the page (Streamlit's element containers beside the chart's own).
CHARTS_JS = """els => els.map(el => {
    const traces = (el._fullData || []).filter(t => t.visible !== false);
    const size = t => Math.max(0, ...['x', 'y', 'z', 'values', 'lat'].map(k => (t[k] && t[k].length) || 0));
    const points = traces.reduce((n, t) => n + (typeof t._length === 'number' ? t._length : size(t)), 0);
    const box = el.closest('[data-testid=stElementContainer]') || el;
    const text = e => (e && e.innerText) || '';
    return {drawn: Array.isArray(el._fullData), points, traces: traces.length,
            title: text(el.querySelector('.gtitle')),
            beside: text(box.previousElementSibling) + ' | ' + text(box.nextElementSibling)};
})"""


def page_defects(page) -> list[str]:
    """Every defect of the page as drawn now: cut or missing figures, cut tile labels, "nan"/"None",
    counts with ".0", empty charts without a sentence. Empty when the page is fine."""
    found = []
    for m in page.locator("[data-testid=stMetricLabel]").evaluate_all(METRICS_JS):
        if m["cut"] or m["text"].endswith("…"):  # "Real-time: d…" (issue 36 item 7)
            found.append(f"label cut short: {m['text']!r}")
    for m in page.locator("[data-testid=stMetricValue]").evaluate_all(METRICS_JS):
        v = m["text"]
        if m["cut"] or "…" in v:
            found.append(f"figure cut short: {v!r}")
        if v in ("nan", "NaN", "None", ""):
            found.append(f"figure missing: {v!r}")
        if COUNT_WITH_POINT_ZERO.match(v):
            found.append(f"count with .0: {v!r}")
    body = page.locator("[data-testid=stMain]").inner_text()
    found += [f"missing value in the text: {m.group(0)!r}"
              for m in re.finditer(r".{0,40}" + MISSING.pattern + r".{0,40}", body)]
    found += [f"count with .0 in the text: {m.group(0)!r}" for m in POINT_ZERO_COUNT.finditer(body)]
    for c in page.locator(".js-plotly-plot").evaluate_all(CHARTS_JS):
        if not c["drawn"]:
            found.append(f"chart not drawn, beside {c['beside']!r}")
        elif c["points"] == 0 and not SAYS_EMPTY.search(c["title"] + " " + c["beside"]):
            found.append(f"empty chart with no sentence: {c['title'] or '(no title)'!r} beside {c['beside']!r}")
    return found


# The sidebar's Kafka badge: which Streamlit alert it is (stAlertContentSuccess, -Warning, -Error) and its text.
BADGE_JS = """() => [...document.querySelectorAll('[data-testid=stSidebar] [data-testid=stAlertContainer]')]
    .map(el => ({kind: (el.querySelector('[data-testid^=stAlertContent]') || el).getAttribute('data-testid'),
                 text: (el.querySelector('[data-testid=stMarkdownContainer]') || el).innerText.trim()}))
    .filter(b => b.text.startsWith('Kafka'))"""


def kafka_badge(page) -> tuple[str, str] | None:
    """("success" | "warning" | "error", its text) of the sidebar's Kafka badge; None when not drawn."""
    badges = page.evaluate(BADGE_JS)
    if not badges:
        return None
    return badges[0]["kind"].removeprefix("stAlertContent").lower(), badges[0]["text"]


def badge_defects(page) -> list[str]:
    """With a broker running: the badge must be there and not red. Red is for a broker that refused
    the connection; one slow to answer (five JVMs starting on two cores) is said in amber
    (issue 36 item 8)."""
    badge = kafka_badge(page)
    if badge is None:
        return ["no Kafka badge in the sidebar"]
    return [f"Kafka badge red while the broker runs: {badge[1]!r}"] if badge[0] == "error" else []


# True once the script run is over and every Plotly chart is drawn at the same size as at the last
# poll (so two polls in a row): what a fixed pause after a page's texts appeared used to wait for.
SETTLED_JS = """() => {
    const app = document.querySelector('[data-testid=stApp]');
    const idle = !app || app.getAttribute('data-test-script-state') === 'notRunning';
    const charts = [...document.querySelectorAll('.js-plotly-plot')].map(el => Array.isArray(el._fullData)
        ? `${el.clientWidth}x${el.clientHeight}:${el._fullData.length}` : 'undrawn');
    const now = charts.join('|') + '#' + document.querySelectorAll('[data-testid=stElementContainer]').length;
    const same = window.__cardstreamSettled === now;
    window.__cardstreamSettled = now;
    return idle && same && !charts.includes('undrawn');
}"""


def settle(page, timeout_ms: int = 10_000) -> None:
    """Wait until the page is drawn and still (`SETTLED_JS`, polled every 300 ms), at most
    `timeout_ms`: a page that never settles is checked as it is, and the check names what is wrong."""
    # deferred: playwright loads only where a browser is driven
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.evaluate("() => { window.__cardstreamSettled = undefined; }")
    try:
        page.wait_for_function(SETTLED_JS, polling=300, timeout=timeout_ms)
    except PlaywrightTimeout:
        pass


# Per Plotly chart on the page: its title, whether Plotly drew it, its box and where it sits, and what
# hides it (an inactive tab, an ancestor not displayed or not visible), for a wait that found none in view.
WHERE_CHARTS_JS = """els => els.map(el => {
    const r = el.getBoundingClientRect();
    let hiddenBy = null;
    for (let e = el; e && e !== document.body; e = e.parentElement) {
        const cs = getComputedStyle(e);
        if (cs.display === 'none' || cs.visibility === 'hidden') {
            hiddenBy = `${e.getAttribute('data-testid') || e.getAttribute('role') || e.tagName}: ` +
                       `display ${cs.display}, visibility ${cs.visibility}`;
            break;
        }
    }
    const title = el.querySelector('.gtitle');
    return {title: title ? title.textContent : '(no title)', drawn: Array.isArray(el._fullData),
            box: `${Math.round(r.width)}x${Math.round(r.height)} at y ${Math.round(r.top)}`, hiddenBy};
})"""


def wait_for_chart(page, where: str, shot: Path, timeout_ms: int = 60_000) -> None:
    """Wait for a Plotly chart in view on the page, the viewport as tall as the page (charts in an
    inactive tab do not count); when none comes, fail naming the page and every chart it holds with
    why it is not seen, and save the page's screenshot to `shot`."""
    # deferred: playwright loads only where a browser is driven
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.locator(".js-plotly-plot").first.wait_for(state="attached", timeout=timeout_ms)
        tall(page)
        page.locator(".js-plotly-plot:visible").first.wait_for(timeout=timeout_ms)
    except PlaywrightTimeout:
        charts = page.locator(".js-plotly-plot").evaluate_all(WHERE_CHARTS_JS)
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot), full_page=True)
        raise AssertionError(f"{where}: no chart in view after {timeout_ms / 1000:.0f} s; the page holds "
                             f"{len(charts)}: {charts} (screenshot: {shot})") from None
    finally:
        page.set_viewport_size({"width": 1440, "height": 1000})


def tall(page) -> None:
    """The viewport as tall as the page, so Plotly draws every chart (it leaves those out of view)."""
    height = page.evaluate("""() => {
        const block = document.querySelector('[data-testid=stMainBlockContainer]');
        return block ? block.scrollHeight : document.body.scrollHeight; }""")
    page.set_viewport_size({"width": 1440, "height": max(900, min(int(height) + 20, 6000))})
    settle(page)  # Plotly redraws at the new size


def check_and_shoot(page, where: str, path: Path, failed_dir: Path | None = None, broker_running: bool = True) -> None:
    """The whole page drawn (`tall`), checked (`page_defects`, and with `broker_running` the sidebar's
    Kafka badge, `badge_defects`), and its screenshot saved to `path`;
    a page that fails the check is saved to `failed_dir` instead (never over a good screenshot). A
    chart not drawn is looked at again three times, each once the page has settled (`settle`), before
    it counts: the live demo's pages rerun every 2 s and redraw their charts."""
    tall(page)
    try:
        defects = page_defects(page)
        for _ in range(3):  # a live page reruns every 2 s: a chart caught mid-redraw is drawn again
            if not defects or not all(d.startswith("chart not drawn") for d in defects):
                break
            settle(page)
            defects = page_defects(page)
        if broker_running:
            defects += badge_defects(page)
        target = path if not defects or failed_dir is None else failed_dir / f"failed-{path.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(target), full_page=True)
        assert not defects, f"{where}: " + "; ".join(defects) + f" (screenshot: {target})"
    finally:
        page.set_viewport_size({"width": 1440, "height": 1000})
