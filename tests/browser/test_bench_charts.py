"""`python -m bench charts` at its smallest size (bench/all.py SMOKE) over a seeded store: it serves
the dashboard itself, watches a page in Chromium and prints its figures; a still store's charts are
drawn once and never rebuilt (the same figure is the same element)."""
from __future__ import annotations

from bench import charts
from bench.all import SMOKE
from controlplane.clock import now_ms
from controlplane.store import connect
from tests.harness.dashboard_seed import seed_store

FIGURES = {"charts", "blank_share", "mean_blank", "rebuilt", "samples"}


def test_the_charts_bench_watches_a_served_dashboard(tmp_path):
    store = tmp_path / "cardstream.db"
    db = connect(store)
    seed_store(db, now_ms(), checkpoint_root=tmp_path / "checkpoints")
    db.conn.close()
    argv = SMOKE["charts"][:]
    argv[argv.index("--settle") + 1] = "5"  # on a loaded host the page's first draw may take seconds
    argv[argv.index("--seconds") + 1] = "3"
    out = charts.main([*argv, "--store", str(store)])
    assert set(out) == {"runs", "store", "seconds"} and out["store"] == str(store.resolve())
    page = out["runs"]["10"]["checkpoints"]
    assert set(page) == FIGURES
    assert page["charts"] >= 5 and page["samples"] >= 3, page  # the seeded page's five charts
    assert page["rebuilt"] == 0, page  # nothing new in the store: no chart made anew
