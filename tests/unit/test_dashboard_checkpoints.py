"""The Checkpoints page: Spark's progress, each checkpoint read from its files, and the batches run
again after a restart, from Spark's own logs and from the sink ledger (never from progress rows)."""
from __future__ import annotations

from dashboard.data import checkpoints as data
from dashboard.views import text
from infra.contracts import GUARANTEES
from tests.harness.dashboard_seed import AMO_RESTARTED, CHECKPOINT_IDS, FAULT_BATCH, NOW, world  # noqa: F401


def test_batches_and_state(world):
    db, _, _ = world
    batches = data.batches(db, NOW)
    assert set(batches["query"]) == {"fraud", "usage-windows", *(f"usage-{g}" for g in GUARANTEES)}
    state = data.state_now(batches).set_index("query")
    assert state.loc["fraud", "last_batch"] == batches[batches["query"] == "fraud"]["batch_id"].max()
    assert state.loc["usage-exactly-once", "state_rows"] > 0 and state.loc["usage-at-least-once", "state_rows"] == 0
    # Spark posts progress after a commit: the batch cut short by the crash has one row, the replay's
    replayed = batches[(batches["query"] == "usage-at-least-once") & (batches["batch_id"] == FAULT_BATCH)]
    assert len(replayed) == 1


def test_positions_from_the_checkpoint_files(world):
    _, seeded, root = world
    pos = data.positions(root, NOW).set_index("query")
    assert pos.loc["usage-at-most-once", "query_id"] == AMO_RESTARTED  # a new checkpoint after the restart
    assert pos.loc["usage-exactly-once", "query_id"] == CHECKPOINT_IDS["usage-exactly-once"]
    alo = pos.loc["usage-at-least-once"]
    assert alo["uncommitted"] and alo["planned_batch"] == alo["committed_batch"] + 1 and alo["planned_s_ago"] < 1
    assert not pos.loc["usage-exactly-once", "uncommitted"] and "fraud-rt" not in pos.index
    running = text.checkpoint_state(alo.to_dict(), running=True)
    assert f"batch {int(alo['planned_batch'])} planned" in running and "running" in running
    stopped = text.checkpoint_state(alo.to_dict(), running=False)
    assert "the next run replays it with the same offsets" in stopped


def test_reruns_from_spark_s_logs(world):
    db, seeded, root = world
    restarts = data.restart_times(db, NOW - 3_600_000)
    assert set(restarts["what"]) == {"killed by crash", "started"}
    reruns = data.log_reruns(root, restarts)
    # planned before the kill, committed by the next run: the durable queries; at-most-once starts afresh
    assert set(reruns["query"]) == {"usage-at-least-once", "usage-exactly-once", "usage-windows"}
    assert set(reruns["batch_id"]) == {FAULT_BATCH} and (reruns["restart_at"] == seeded.fault_at).all()
    assert (reruns["planned_at"] < seeded.fault_at).all() and (reruns["committed_at"] > seeded.fault_at).all()


def test_repeats_from_the_sink_ledger(world):
    db, _, _ = world
    repeats = data.ledger_repeats(db, NOW).set_index("sink")
    assert set(repeats.index) == {"usage-at-least-once", "usage-exactly-once", "usage-windows"}
    assert repeats.loc["usage-at-least-once", "outcomes"] == "applied, applied"
    assert repeats.loc["usage-exactly-once", "outcomes"] == "applied, skipped"
    assert (repeats["batch_id"] == FAULT_BATCH).all()


def test_nothing_without_checkpoints_or_restarts(store, tmp_path):
    assert data.positions(tmp_path / "none", NOW).empty
    assert data.log_reruns(tmp_path / "none", data.restart_times(store, 0)).empty
    assert data.ledger_repeats(store, NOW).empty and data.batches(store, NOW).empty
    assert data.state_now(data.batches(store, NOW)).empty
