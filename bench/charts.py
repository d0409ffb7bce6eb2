"""`python -m bench charts [--chart-seconds 0,10 | --url URL] [--pages ...] [--seconds 30] --json`:
how much of the time the dashboard's charts are blank in a browser, as a user watching a page sees it.

By default the bench serves the dashboard itself, once per value of `--chart-seconds`
(DASHBOARD_CHART_SECONDS: a chart whose data changed is rebuilt at most that often;
docs/dashboard.md), all over the same store (the run folder's, make demo's; `--store`), each on a
free port, and watches each page on each in turn; `--url` watches a dashboard already served
instead. Debian's Chromium (Playwright) opens the page, makes the viewport as tall as the page
(Plotly draws only the charts in view), waits `--settle` seconds, then samples it every 0.25 s for
`--seconds`: the charts on show (not in a hidden tab) and those Plotly has drawn. Per page:
`blank_share`, the share of samples with a chart not drawn; `mean_blank`, the charts not drawn in a
sample on average; `rebuilt`, the chart elements made anew over the window (Streamlit makes a new
element for a chart whose figure changed). The bench only watches: run it beside `make demo` for a
live store (a still store's charts never change); the figures are those of the host as it is.
The last line: {"runs": {setting: {page: {"charts", "blank_share", "mean_blank", "rebuilt",
"samples"}}}, "store", "seconds"} (setting: the chart seconds served, or "url").
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.harness.dashboard import CHROMIUM, CHROMIUM_ARGS, served
from infra.config import load

# On show: not in a hidden tab or container. Drawn: Plotly's data on the node and a height.
SAMPLE_JS = """() => {
  const els = [...document.querySelectorAll('.js-plotly-plot')]
    .filter(e => e.closest('[hidden]') === null && getComputedStyle(e).visibility !== 'hidden');
  let fresh = 0;
  for (const e of els) { if (!e.__benchSeen) { e.__benchSeen = true; fresh++; } }
  const drawn = els.filter(e => Array.isArray(e._fullData) && e.getBoundingClientRect().height > 0).length;
  return {shown: els.length, drawn, fresh};
}"""
TALL_JS = """() => { const b = document.querySelector('[data-testid=stMainBlockContainer]');
  return b ? b.scrollHeight : document.body.scrollHeight; }"""
EVERY_S = 0.25


def log(message: str) -> None:
    print(f"bench charts: {message}", file=sys.stderr, flush=True)


def summary(samples: list[dict]) -> dict:
    """A page's samples (`SAMPLE_JS`'s answers, the first one's fresh elements not counted) -> its
    figures."""
    if not samples:
        return {"charts": 0, "blank_share": None, "mean_blank": None, "rebuilt": 0, "samples": 0}
    blank = [s["shown"] - s["drawn"] for s in samples]
    return {"charts": max(s["shown"] for s in samples),
            "blank_share": round(sum(1 for b in blank if b > 0) / len(samples), 3),
            "mean_blank": round(sum(blank) / len(samples), 2),
            "rebuilt": sum(s["fresh"] for s in samples[1:]), "samples": len(samples)}


def watch(page, url: str, seconds: float, settle_s: float) -> list[dict]:
    page.set_viewport_size({"width": 1440, "height": 1000})
    page.goto(url, wait_until="domcontentloaded", timeout=120_000)
    try:
        page.locator(".js-plotly-plot").first.wait_for(state="attached", timeout=60_000)
    except Exception:  # noqa: BLE001 - a page with no chart (no data yet, or none drawn there): no samples
        return []
    height = page.evaluate(TALL_JS)
    page.set_viewport_size({"width": 1440, "height": max(900, min(int(height) + 20, 6000))})
    time.sleep(settle_s)
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append(page.evaluate(SAMPLE_JS))
        time.sleep(EVERY_S)
    return samples


def watch_all(dashboards: dict[str, str], pages: list[str], seconds: float, settle_s: float) -> dict:
    """Each page on each dashboard (setting -> base URL) in turn: {setting: {page: summary}}."""
    # deferred: playwright only where a browser runs
    from playwright.sync_api import sync_playwright

    runs = {setting: {} for setting in dashboards}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            for name in pages:
                for setting, base in dashboards.items():
                    page = browser.new_page()
                    try:
                        url = f"{base}/{'' if name == 'overview' else name}"
                        runs[setting][name] = summary(watch(page, url, seconds, settle_s))
                    finally:
                        page.close()
                    log(f"{name} ({setting}): {runs[setting][name]}")
        finally:
            browser.close()
    return runs


def main(argv: list[str]) -> dict:
    s = load()
    parser = argparse.ArgumentParser(prog="python -m bench charts")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line (always)")
    parser.add_argument("--chart-seconds", default="0,10",
                        help="DASHBOARD_CHART_SECONDS of each dashboard served (comma-separated)")
    parser.add_argument("--url", help="watch this dashboard instead of serving any")
    parser.add_argument("--store", type=Path, help="the store the served dashboards read (default: the run folder's)")
    parser.add_argument("--pages", default="overview,guarantees,windows,checkpoints,fraud",
                        help="comma-separated page paths (overview is the root)")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each page is sampled")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds between a page's load and its samples")
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        raise SystemExit("--seconds must be positive.")
    if not CHROMIUM.exists():
        raise SystemExit(f"Chromium is missing at {CHROMIUM}: install it with infra/install-chromium.sh.")
    store = (args.store or s.store_path).resolve()
    if not args.url and not store.exists():
        log(f"no store at {store} yet: the pages will say they have no data (run it beside `make demo`)")
    pages = [n.strip() for n in args.pages.split(",") if n.strip()]
    if args.url:
        return {"runs": watch_all({"url": args.url.rstrip("/")}, pages, args.seconds, args.settle),
                "store": None, "seconds": args.seconds}
    settings = [v.strip() for v in args.chart_seconds.split(",") if v.strip()]
    env = {"CARDSTREAM_DB": str(store)}
    beside = store.parent / "checkpoints"  # a run folder's: its store and checkpoints
    if "CHECKPOINT_ROOT" not in os.environ and beside.is_dir():
        env["CHECKPOINT_ROOT"] = str(beside)
    with contextlib.ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-charts-")))
        dashboards = {v: stack.enter_context(served({**env, "DASHBOARD_CHART_SECONDS": v}, logs / f"streamlit-{v}.log",
                                                    unset=("DASHBOARD_TOKEN",)))
                      for v in settings}
        log(f"serving {store} at " + ", ".join(f"{b} (chart seconds {v})" for v, b in dashboards.items()))
        runs = watch_all(dashboards, pages, args.seconds, args.settle)
    return {"runs": runs, "store": str(store), "seconds": args.seconds}
