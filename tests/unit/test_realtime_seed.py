"""The real-time path's seed (pipelines.fraud.seed): where a start reads and folds, and the file
the JVM reads. Pure: no Kafka, no Spark (the JVM side is tested in tests/spark/test_fraud_sql.py)."""
from __future__ import annotations

import pytest

from pipelines.fraud import seed
from pipelines.fraud.analyzers import DEFAULT_LIMITS
from infra.partitioner import partitions_for

pytestmark = pytest.mark.unit
NOW = 1_800_000_000_000


def test_without_a_snapshot_both_paths_start_where_the_stateful_one_does():
    snap = seed.Snapshot()
    latest = seed.plan(snap, {0: 5, 1: 0}, {0: 100, 1: 40}, "latest", None, 1_000, NOW)
    assert latest.starts == latest.folds == {0: 100, 1: 40} and latest.holes == {}
    earliest = seed.plan(snap, {0: 5, 1: 0}, {0: 100, 1: 40}, "earliest", None, 1_000, NOW)
    assert earliest.starts == earliest.folds == {0: 5, 1: 0} and earliest.holes == {}


def test_a_snapshot_is_folded_from_its_end_and_at_least_once_reads_back_to_its_own_commit():
    snap = seed.Snapshot(as_of=NOW - 5_000, ends={0: 90, 1: 30})
    most = seed.plan(snap, {0: 0, 1: 0}, {0: 100, 1: 40}, "latest", None, 1_000, NOW)
    assert most.starts == most.folds == {0: 90, 1: 30}
    least = seed.plan(snap, {0: 0, 1: 0}, {0: 100, 1: 40}, "latest", {0: 80, 1: 35}, 1_000, NOW)
    assert least.starts == {0: 80, 1: 30} and least.folds == {0: 90, 1: 30} and least.holes == {}


def test_a_replay_longer_than_the_bound_leaves_a_dated_hole():
    snap = seed.Snapshot(as_of=NOW - 600_000, ends={0: 10, 1: 9_950})
    p = seed.plan(snap, {0: 0, 1: 0}, {0: 10_000, 1: 10_000}, "latest", {0: 5}, 100, NOW)
    assert p.starts == {0: 9_900, 1: 9_950} and p.folds == {0: 9_900, 1: 9_950}
    assert p.holes == {0: NOW - 600_000}
    # without a snapshot the hole is dated at the start
    q = seed.plan(seed.Snapshot(), {0: 0}, {0: 10_000}, "earliest", None, 100, NOW)
    assert q.holes == {0: NOW} and q.folds == {0: 9_900}


def test_offsets_outside_the_topic_are_clamped():
    snap = seed.Snapshot(as_of=NOW, ends={0: 500})  # a snapshot of a longer topic (recreated since)
    p = seed.plan(snap, {0: 0}, {0: 100}, "latest", None, 1_000, NOW)
    assert p.starts == p.folds == {0: 100}


def test_the_seed_lists_each_card_on_its_kafka_partition_and_ends_with_a_marker():
    profiles = [("card-1", 3, 2500.0, 48.85, 2.35, NOW - 1_000, f"{NOW - 1_000}", f"{NOW - 1_000};2500;0"),
                ("card-2", None, None, None, None, None, ""),
                ("bad\tid", 1, 1.0, 0.0, 0.0, NOW, "")]
    snap = seed.Snapshot(as_of=NOW, ends={0: 7}, profiles=profiles)
    lines = list(seed.seed_lines("tx", snap, seed.Plan({0: 7}, {0: 7}, {}), DEFAULT_LIMITS, 60_000, 4))
    assert lines[0] == "scope\ttx" and lines[-1] == "end-of-seed"
    cards = [ln.split("\t") for ln in lines if ln.startswith("card\t")]
    assert [c[2] for c in cards] == ["card-1", "card-2"]  # an id the file cannot hold is left out
    want = partitions_for([b"card-1", b"card-2"], 4).tolist()
    assert [int(c[1]) for c in cards] == want
    assert cards[0][3:] == ["3", "2500.0", "48.85", "2.35", str(NOW - 1_000), str(NOW - 1_000), f"{NOW - 1_000};2500;0"]
    assert cards[1][3:] == ["", "", "", "", "", "", ""]
    (limits,) = [ln for ln in lines if ln.startswith("limits\t")]
    pairs = dict(p.split("=") for p in limits.split("\t")[1:])
    assert pairs["ttl_ms"] == "60000" and pairs["velocity_window_ms"] == "60000"
    assert set(pairs) == {*DEFAULT_LIMITS.__dataclass_fields__, "ttl_ms"}


def test_the_seed_is_written_whole(tmp_path):
    path = seed.write(tmp_path / "s" / "1.tsv", iter(["scope\tx", "end-of-seed"]))
    assert path.read_text() == "scope\tx\nend-of-seed\n"
    assert not list(tmp_path.glob("s/*.tmp"))


def _profile_rows(cards, batch):
    return [{"card_id": c, "p_count": batch, "p_mean": 100.0, "p_lat": None, "p_lon": None, "p_time": None,
             "p_times": ""} for c in cards]


def test_the_seed_folds_from_the_profiles_own_cut_not_a_later_batch_that_wrote_none(store):
    """Issue 36 item 2, first case: the fraud job writes card_profiles in real-time mode only, so
    after a micro-batch run the newest applied batch covers offsets the profiles never folded: the
    seed takes the offsets the profiles were written with (their cut), and a start folds from there
    (or says the hole)."""
    from controlplane import ledger
    from controlplane.store import transaction
    from pipelines.fraud.sinks import write_profiles

    def batch(i):
        return ledger.Batch("fraud", "cp", i, end_offsets={"tx": {"0": 10 * (i + 1), "1": 5 * (i + 1)}})

    with transaction(store) as conn:  # a real-time run's batches 0-2 wrote profiles; a micro-batch run's 3-5 none
        for i in range(6):
            ledger.apply_once(conn, batch(i), 1)
            if i <= 2:
                write_profiles(conn, _profile_rows(["card-a", "card-b"], i), batch(i))
    snap = seed.read_snapshot(store, "fraud", "tx", now=NOW, ttl_ms=10**13)
    assert snap.ends == {0: 30, 1: 15} and snap.history and len(snap.profiles) == 2
    p = seed.plan(snap, {0: 0, 1: 0}, {0: 60, 1: 30}, "latest", None, 1_000, NOW)
    assert p.folds == {0: 30, 1: 15} and p.holes == {}  # batches 3-5 are folded again
    short = seed.plan(snap, {0: 0, 1: 0}, {0: 60, 1: 30}, "latest", None, 20, NOW)
    assert short.holes == {0: snap.as_of} and short.folds == {0: 40, 1: 15}  # or the hole is said


def test_history_without_profiles_folds_from_the_topic_start():
    """A micro-batch run before the first real-time start: no cut, but history the stateful path
    applied; the profiles fold from the topic's start (policy latest or not), or say the hole,
    dated by the first record they miss."""
    snap = seed.Snapshot(history=True)
    p = seed.plan(snap, {0: 5}, {0: 100}, "latest", None, 1_000, NOW)
    assert p.folds == {0: 5} and p.holes == {}
    q = seed.plan(snap, {0: 5}, {0: 10_000}, "latest", None, 100, NOW)
    assert q.folds == {0: 9_900} and q.missed == {0: 5} and 0 in q.holes


def test_records_the_topic_no_longer_holds_are_a_hole():
    snap = seed.Snapshot(as_of=NOW - 60_000, ends={0: 50})
    p = seed.plan(snap, {0: 80}, {0: 100}, "latest", None, 1_000, NOW)  # retention deleted 50-79
    assert p.holes == {0: NOW - 60_000} and p.folds == {0: 80} and p.missed == {0: 80}


def test_the_seed_holds_only_profiles_within_the_ttl(store):
    from controlplane.store import transaction

    with transaction(store) as conn:
        conn.execute("INSERT INTO card_profile_cuts (sink, checkpoint_id, batch_id, end_offsets, ts) "
                     "VALUES ('fraud', 'cp', 1, '{\"tx\": {\"0\": 7}}', ?)", [NOW - 1_000])
        conn.executemany("INSERT INTO card_profiles (card_id, count, updated_at) VALUES (?, 1, ?)",
                         [("alive", NOW - 59_000), ("gone", NOW - 61_000)])
    snap = seed.read_snapshot(store, "fraud", "tx", now=NOW, ttl_ms=60_000)
    assert [r[0] for r in snap.profiles] == ["alive"] and snap.ends == {0: 7} and snap.as_of == NOW - 1_000


def test_the_seed_says_its_cut_and_the_topic_partitions():
    snap = seed.Snapshot(as_of=NOW - 5_000, ends={0: 7})
    lines = list(seed.seed_lines("tx", snap, seed.Plan({0: 7}, {0: 7}, {}), DEFAULT_LIMITS, 60_000, 4, now=NOW))
    assert f"cut\t{NOW - 5_000}" in lines and "partitions\t4" in lines
    fresh = list(seed.seed_lines("tx", seed.Snapshot(), seed.Plan({0: 0}, {0: 0}, {}), DEFAULT_LIMITS, 1, 4, now=NOW))
    assert f"cut\t{NOW}" in fresh


def test_cards_quiet_past_the_state_ttl_are_seeded_with_their_history_only(store):
    """Issue 35 item 2: the stateful path keeps a card's event-time windows (61 days) long after
    its analyzers' profile (STATE_TTL_MINUTES): the seed brings the history of such a card, not
    its stale profile, and a card with neither is left out."""
    from controlplane.store import transaction

    with transaction(store) as conn:
        conn.execute("INSERT INTO card_profile_cuts (sink, checkpoint_id, batch_id, end_offsets, ts) "
                     "VALUES ('fraud', 'cp', 1, '{\"tx\": {\"0\": 7}}', ?)", [NOW - 1_000])
        conn.executemany("INSERT INTO card_profiles (card_id, count, mean, times, history, updated_at) "
                         "VALUES (?, 4, 10.0, '1,2', ?, ?)",
                         [("alive", "5;100;0", NOW - 59_000), ("quiet", "3;900;1", NOW - 61_000),
                          ("gone", None, NOW - 61_000), ("expired", "1;1;0", NOW - 200_000)])
    snap = seed.read_snapshot(store, "fraud", "tx", now=NOW, ttl_ms=60_000, history_ttl_ms=120_000)
    got = {r[0]: r for r in snap.profiles}
    assert set(got) == {"alive", "quiet"}
    assert got["alive"] == ("alive", 4, 10.0, None, None, None, "1,2", "5;100;0")
    assert got["quiet"] == ("quiet", None, None, None, None, None, "", "3;900;1")
    # every seeded card carries its history: the windows are whole since the companion's table says
    assert seed.history_from(snap, -5) == -5 and seed.history_from(snap, None) is None
    old = seed.Snapshot(as_of=NOW, ends={0: 7}, profiles=[("written-before", 1, 1.0, None, None, None, "", None)])
    assert seed.history_from(old, -5) is None
    lines = list(seed.seed_lines("tx", snap, seed.Plan({0: 7}, {0: 7}, {}), DEFAULT_LIMITS, 60_000, 4,
                                 history_from=-5, history_ttl_ms=120_000))
    assert "history_from\t-5" in lines and "history_ttl\t120000" in lines


def test_the_sink_keeps_each_card_s_history_from_the_row_that_carries_it(store):
    """Issue 35 item 2: a batch's card operator puts the card's history on one of its rows (the
    card's last; the others null), whatever order the batch's rows reach the sink in; a batch
    whose rows of the card carry none keeps the history it has."""
    from controlplane import ledger
    from controlplane.store import transaction
    from pipelines.fraud.features import CARD_HISTORY
    from pipelines.fraud.sinks import write_profiles

    def batch(i):
        return ledger.Batch("fraud", "cp", i, end_offsets={"tx": {"0": 10 * (i + 1)}})

    rows = _profile_rows(["card-a", "card-a", "card-b"], 1)
    rows[0][CARD_HISTORY], rows[1][CARD_HISTORY], rows[2][CARD_HISTORY] = "1,2;500,700;0,0", None, "3;900;0"
    with transaction(store) as conn:
        write_profiles(conn, rows, batch(0))
        write_profiles(conn, _profile_rows(["card-a"], 2), batch(1))
    snap = seed.read_snapshot(store, "fraud", "tx", now=NOW, ttl_ms=10**13)
    assert {r[0]: r[7] for r in snap.profiles} == {"card-a": "1,2;500,700;0,0", "card-b": "3;900;0"}
    assert seed.history_from(snap, 0) == 0
