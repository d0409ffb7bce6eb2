"""The Windows page's queries on the seeded store: windows per kind, watermarks, late events."""
from __future__ import annotations

import pytest

from dashboard.data import windows as data
from tests.harness.dashboard_seed import NOW, WATERMARK_MS, world  # noqa: F401 - a fixture


def test_windows_per_kind(world):
    db, _, _ = world
    tumbling = data.windows(db, "tumbling", NOW)
    assert 5 <= len(tumbling) <= 7 and (tumbling["length_s"] == 60).all()
    sliding = data.windows(db, "sliding", NOW)
    assert (sliding["length_s"] == 300).all()
    sessions = data.windows(db, "session", NOW)
    assert len(sessions) == 97 and tumbling["window_start"].is_monotonic_decreasing


def test_watermarks_with_their_sources(world):
    db, _, _ = world
    wm = data.watermarks(db, NOW).set_index("query")
    assert wm.loc["usage-windows", "source"] == "store"          # usage_watermarks wins for the windows
    assert wm.loc["usage-windows", "behind_s"] == pytest.approx(WATERMARK_MS / 1000, abs=1)
    assert wm.loc["fraud", "source"] == "spark" and 30 < wm.loc["fraud", "behind_s"] < 32
    assert wm.loc["usage-exactly-once", "behind_s"] == pytest.approx(300, abs=1)  # DEDUPE_SECONDS / 2
    assert "usage-at-least-once" not in wm.index                 # a query without a watermark


def test_late_events(world):
    db, _, _ = world
    late = data.late_events(db).set_index("kind")
    assert set(late.index) == {"tumbling", "sliding", "session"} and late.loc["tumbling", "dropped"] > 0
    # a late event counts for its tumbling window, each of the 5 sliding ones, and its session minute
    assert late.loc["sliding", "dropped"] == 5 * late.loc["tumbling", "dropped"]
    assert not data.late_series(db, NOW).empty
    assert data.dropped_by_watermark(db, NOW).set_index("query").loc["fraud", "dropped"] > 0


def test_empty_store(store):
    for frame in (data.windows(store, "session", NOW), data.watermarks(store, NOW), data.late_events(store),
                  data.late_series(store, NOW), data.dropped_by_watermark(store, NOW)):
        assert frame.empty
