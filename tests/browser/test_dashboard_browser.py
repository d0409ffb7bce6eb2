"""The dashboard in a real browser: `streamlit run` on a free port against a seeded store, Debian's
Chromium driven by Playwright. Opens every page, checks its key numbers, presses the crash button,
sees the command recorded and marked on the guarantees chart, and saves a screenshot of each page
into docs/screenshots/ (the README shows them)."""
from __future__ import annotations

import pytest

from tests.harness.browser import SHOTS, chromium, streamlit
from tests.harness.dashboard_seed import OBSERVED, TOPIC_END, seed_store
from controlplane.clock import now_ms
from controlplane.store import connect

# url path -> texts that must appear on it
PAGES = {
    "": ["Tx in /s", "200.0", "Latency p99", "usage-at-least-once", "Kafka up"],
    "guarantees": [f"{OBSERVED['at-least-once']:,}", f"{OBSERVED['at-most-once']:,}", "+380 duplicates",
                   "skipped replayed batch 41"],
    "faults": ["Inject crash", "SIGKILL sent to pid 4242", "Recovery times"],
    "windows": ["Late events dropped", "Watermark", "Tumbling"],
    "checkpoints": ["Restores", "usage-exactly-once", "Batch history"],
    "fraud": ["92.0 %", "95.8 %", "Recently flagged"],
    "controls": ["Set rate", "Pause", "rate 2500/s"],
}
NAMES = {"": "overview"}


def fill(kafka: str, topics: dict[str, str]) -> None:
    """Put exactly the seeded end offsets into fresh topics, so the lag on the page is real."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka, linger_ms=20, batch_size=256_000)
    for name, ends in TOPIC_END.items():
        for partition, count in ends.items():
            for _ in range(count):
                producer.send(topics[name], b"{}", partition=partition)
    producer.flush()
    producer.close()


@pytest.fixture
def dashboard(tmp_path, kafka, topic):
    """A real `streamlit run dashboard/app.py` on a free port, reading a seeded store."""
    topics = {"transactions": topic("transactions", partitions=2), "decisions": topic("decisions", partitions=2)}
    fill(kafka, topics)
    db_path = tmp_path / "browser.db"
    db = connect(db_path)
    # a little ahead of the clock, so "the last 10 s" still holds decisions when the pages open
    seed_store(db, now_ms() + 20_000, topics)
    db.conn.close()
    with streamlit({"CARDSTREAM_DB": str(db_path), "KAFKA_BOOTSTRAP": kafka}, tmp_path / "streamlit.log") as base:
        yield base, db_path


def test_every_page_in_chromium(dashboard):
    base, db_path = dashboard
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        for path, texts in PAGES.items():
            page.goto(f"{base}/{path}")
            for text in texts:
                page.get_by_text(text, exact=False).first.wait_for(state="attached", timeout=30_000)
            page.locator(".js-plotly-plot").first.wait_for(timeout=30_000) if path not in ("controls",) else None
            page.wait_for_timeout(1500)  # let Plotly finish drawing
            tall = page.evaluate("""() => {
                const block = document.querySelector('[data-testid=stMainBlockContainer]');
                return block ? block.scrollHeight : document.body.scrollHeight; }""")
            page.set_viewport_size({"width": 1440, "height": max(900, min(int(tall) + 20, 5000))})
            page.wait_for_timeout(1200)  # Plotly redraws at the new size
            page.screenshot(path=str(SHOTS / f"{NAMES.get(path, path)}.png"), full_page=True)

        page.set_viewport_size({"width": 1440, "height": 1000})
        page.goto(f"{base}/faults")
        page.get_by_role("button", name="Inject crash", exact=True).click()
        page.get_by_text("issued: crash on fraud").first.wait_for(timeout=30_000)
        db = connect(db_path)
        kinds = [(r["kind"], r["job"], r["status"]) for r in db.query("SELECT * FROM commands ORDER BY id")]
        db.conn.close()
        assert kinds[-1] == ("crash", "fraud", "pending")
        page.goto(f"{base}/guarantees")
        page.get_by_text("crash on fraud at").first.wait_for(timeout=30_000)
        page.wait_for_timeout(1500)
        markers = page.locator(".js-plotly-plot .annotation-text").evaluate_all(
            "els => els.map(e => e.textContent || '')")
        assert sum("crash" in m for m in markers) == 2, markers
        page.screenshot(path=str(SHOTS / "guarantees-after-crash.png"))
