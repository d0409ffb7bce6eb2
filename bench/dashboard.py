"""`python -m bench dashboard [--store PATH] [--rounds 5] --json`: the CPU one draw of each
dashboard page takes, as the page is now over the store it reads (`make demo`'s by default).

Each page of dashboard/app.py is run with Streamlit's AppTest in this process (the page's queries,
its charts built, checked and serialised as the server sends them; every fragment of the page),
once untimed, then `--rounds` times; per page the median CPU time of a draw (this process's, so a
busy machine moves it less than the clock), the charts it drew and their size as sent. A page redraws every
DASHBOARD_REFRESH_SECONDS (2) while it is open, so its draw over that interval is the share of a
core an open page costs the host. Run it beside `make demo` for figures of a live store: a store
with no recent rows draws pages of "no data" notes (`recent_batches` says how many it had).
The last line: {"pages": {page: {"cpu_ms", "charts", "chart_kib", "errors"}}, "store",
"recent_batches", "refresh_s"}.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

from infra.config import ROOT, load

APP = ROOT / "dashboard" / "app.py"


def log(message: str) -> None:
    print(f"bench dashboard: {message}", file=sys.stderr, flush=True)


def pages() -> list[str]:
    """The pages' scripts as app.py declares them, relative to it (views/overview.py ...)."""
    return re.findall(r'st\.Page\("([^"]+)"', APP.read_text())


def draw_page(page: str, rounds: int) -> dict:
    # deferred: Streamlit loads only where a page is drawn
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    at.switch_page(page)
    at.run()  # untimed: the page's imports and caches
    cpu = []
    for _ in range(rounds):
        t0 = time.process_time()
        at.run()
        cpu.append((time.process_time() - t0) * 1000)
    specs = [e.proto.spec for e in at.get("plotly_chart")]
    errors = [e.value for e in at.error] + [str(e.value) for e in at.exception]
    return {"cpu_ms": round(statistics.median(cpu)), "charts": len(specs),
            "chart_kib": round(sum(len(s) for s in specs) / 1024), "errors": errors}


def recent_batches(store: Path, minutes: float = 15) -> int:
    import sqlite3

    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=2) as conn:
            return conn.execute("SELECT COUNT(*) FROM batch_progress WHERE ts > ?",
                                (int((time.time() - minutes * 60) * 1000),)).fetchone()[0]
    except sqlite3.Error:
        return 0


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench dashboard")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line (always)")
    parser.add_argument("--store", type=Path, help="the store to read (default: the run folder's, make demo's); "
                        "the checkpoints beside it, when there are")
    parser.add_argument("--rounds", type=int, default=5, help="timed draws of each page; figures are medians")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        raise SystemExit("--rounds must be positive.")
    if args.store:
        if not args.store.exists():
            raise SystemExit(f"no store at {args.store}: run `make demo`, or name one with --store.")
        os.environ["CARDSTREAM_DB"] = str(args.store.resolve())
        beside = args.store.resolve().parent / "checkpoints"  # a run folder's: its store and checkpoints
        if "CHECKPOINT_ROOT" not in os.environ and beside.is_dir():
            os.environ["CHECKPOINT_ROOT"] = str(beside)
    os.environ.pop("DASHBOARD_TOKEN", None)  # the pages themselves, not the token gate
    s = load()
    recent = recent_batches(s.store_path)
    log(f"{s.store_path}: {recent} batches in the last 15 minutes")
    if not recent:
        log("no batch in the last 15 minutes: these are the pages' no-data draws (run it beside `make demo`)")
    out = {}
    for page in pages():
        name = Path(page).stem
        out[name] = draw_page(page, args.rounds)
        log(f"{name}: {out[name]['cpu_ms']} ms of CPU a draw, {out[name]['charts']} charts "
            f"({out[name]['chart_kib']} KiB)" + (f"; errors: {out[name]['errors']}" if out[name]["errors"] else ""))
    return {"pages": out, "store": str(s.store_path), "recent_batches": recent,
            "refresh_s": s.dashboard_refresh_seconds}
