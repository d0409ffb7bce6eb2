"""The Guarantees page's figures and attributions, on the seeded store and on hand-made cases.

Every figure is the audit's; every cause is a measured event (the sink ledger, the command log,
the supervisor's restarts); a change nothing explains says so."""
from __future__ import annotations

from controlplane import ledger
from dashboard.data import guarantees as data
from dashboard.views import text
from infra.contracts import GUARANTEES
from tests.harness.dashboard_seed import FAULT_BATCH, NOW, quiet, world  # noqa: F401 - fixtures


def test_latest_audit_is_the_newest_cut_per_guarantee(world):
    db, seeded, _ = world
    latest = data.latest(db)
    processed = latest[latest["metric"] == "processed"].set_index("guarantee")
    assert set(processed.index) == set(GUARANTEES) and (processed["ts"] == NOW).all()
    for g in GUARANTEES:
        row, final = processed.loc[g], seeded.final[g]
        assert (row["truth"], row["observed"], row["lost"], row["duplicated"]) == \
               (final["truth"], final["observed"], final["lost"], final["duplicated"])
    amo, alo, eo = (processed.loc[g] for g in GUARANTEES)
    assert amo["lost"] > 0 and amo["duplicated"] == 0
    assert alo["lost"] == 0 and alo["duplicated"] == alo["replayed"] > 0 and alo["upstream"] == 0
    assert alo["lag_records"] > 0 and alo["truth"] < eo["truth"]  # behind: less truth at its cut, no loss
    assert eo["lost"] == eo["duplicated"] == 0 and eo["observed"] == eo["truth"]


def test_audit_series_and_fault_marks(world):
    db, seeded, _ = world
    series = data.audit_series(db, NOW)
    assert len(series) == 3 * 60 and series["time"].is_monotonic_increasing
    with_baseline = data.audit_series(db, NOW, minutes=2, baseline=True)
    assert len(with_baseline) == 3 * 24 + 3  # 24 samples in 2 minutes, and one before the window each
    marks = data.fault_marks(db, NOW)
    assert list(marks["kind"]) == ["bad-input", "crash"]  # faults only: the simulator's set-rate is a control
    assert marks["time"].iloc[-1].value // 1_000_000 == seeded.fault_at
    assert list(data.fault_marks(db, NOW, job="usage")["kind"]) == ["crash"]  # what the Guarantees chart marks


def test_the_crash_is_told_per_guarantee_from_the_ledger_and_the_command_log(world):
    db, seeded, _ = world
    stories = data.stories(db, NOW)
    amo, alo, eo = (stories[g] for g in GUARANTEES)
    assert len(amo) == len(alo) == len(eo) == 1
    [amo], [alo], [eo] = amo, alo, eo
    assert amo["lost"] == seeded.final["at-most-once"]["lost"] and [e["kind"] for e in amo["evidence"]] == ["new-checkpoint"]
    assert alo["replayed"] == seeded.final["at-least-once"]["replayed"]
    [twice] = alo["evidence"]
    assert twice["kind"] == "applied-twice" and twice["batch_id"] == FAULT_BATCH and twice["count"] == 2
    [skip] = eo["evidence"]
    assert skip["kind"] == "skipped" and skip["batch_id"] == FAULT_BATCH and eo["lost"] == eo["replayed"] == 0
    for change in (amo, alo, eo):
        kinds = {(c["kind"], c.get("fault")) for c in change["causes"]}
        assert ("command", "crash") in kinds and ("recovery", "crash") in kinds and ("start", None) in kinds
        assert ("command", "bad-input") not in kinds  # the simulator's fault is not the usage job's
    said = text.change(alo)
    assert f"applied batch {FAULT_BATCH} twice" in said and "replayed +" in said and "crash #" in said
    assert "started a new checkpoint" in text.change(amo) and "starts from the latest offsets" in text.change(amo)
    assert f"skipped the replay of batch {FAULT_BATCH}" in text.change(eo)


def test_no_fault_and_just_behind_means_lost_0_duplicated_0(quiet):
    db, seeded, _ = quiet
    series = data.audit_series(db, NOW)
    assert (series["lost"] == 0).all() and (series["duplicated"] == 0).all()
    assert series[series["guarantee"] == "at-least-once"]["lag_records"].iloc[-1] > 0
    assert all(not changes for changes in data.stories(db, NOW).values())
    latest = data.latest(db)
    row = latest[(latest["metric"] == "processed") & (latest["guarantee"] == "at-least-once")].iloc[0].to_dict()
    badges = text.audit_badges(row)
    assert "lost 0 · duplicated 0" in badges and "behind" in badges and ":red-badge" not in badges


# --- attribution on hand-made samples --------------------------------------------------------------

def sample(ts, batch, lost=0, replayed=0, upstream=0, ckpt="A", truth=1000):
    return {"ts": ts, "checkpoint_id": ckpt, "committed_batch": batch, "lost": lost, "replayed": replayed,
            "upstream": upstream, "duplicated": replayed + upstream, "truth": truth,
            "observed": truth - lost + replayed + upstream}


def handed(batch, outcome, ts, ckpt="A", processed=50, reason=None):
    return {"checkpoint_id": ckpt, "batch_id": batch, "outcome": outcome, "processed": processed, "reason": reason,
            "ts": ts}


def command(cid, kind, at, done, job="usage", **params):
    return {"kind": "command", "id": cid, "fault": kind, "job": job, "params": params, "status": "done",
            "at": at, "until": max(done, at + params.get("seconds", 0) * 1000), "result": ""}


def test_a_dropped_batch_is_lost_with_its_reason_during_sink_down():
    audit = [sample(1_000, 4), sample(6_000, 5, lost=50)]
    rows = [handed(4, ledger.APPLIED, 900), handed(5, ledger.DROPPED, 5_500, reason="the usage sink rejects writes")]
    events = [command(7, "sink-down", 5_000, 5_001, seconds=10), command(8, "crash", 20_000, 20_001)]
    [change] = data.changes("at-most-once", audit, rows, events)
    assert change["lost"] == 50 and [c["id"] for c in change["causes"]] == [7]
    said = text.change(change)
    assert "lost +50" in said and "dropped batch 5 (50 records, never retried): the usage sink rejects writes" in said
    assert "sink-down #7 on usage" in said and "no fault recorded" not in said


def test_a_change_nothing_explains_says_no_fault_recorded():
    audit = [sample(1_000, 4), sample(6_000, 5, lost=10)]
    rows = [handed(4, ledger.APPLIED, 900), handed(5, ledger.APPLIED, 5_500)]
    [change] = data.changes("at-most-once", audit, rows, [command(3, "crash", 100_000, 100_001)])
    assert change["evidence"] == [] and change["causes"] == []
    assert text.change(change).endswith("lost +10 — no fault recorded.")


def test_a_loss_seen_after_the_new_checkpoint_s_sample_is_told_with_its_crash():
    """At-most-once's new checkpoint starts at one sample; what it skipped enters the cut at a later
    one (its first commit): that loss is the new checkpoint's, after the crash (the README's picture
    of 2026-11-23 said "no fault recorded" there)."""
    audit = [sample(1_000, 4), sample(6_000, 0, ckpt="B"), sample(11_000, 1, lost=40, ckpt="B"),
             sample(16_000, 2, lost=45, ckpt="B")]
    rows = [handed(4, ledger.APPLIED, 900), handed(0, ledger.APPLIED, 5_500, ckpt="B"),
            handed(1, ledger.APPLIED, 10_500, ckpt="B"), handed(2, ledger.APPLIED, 15_500, ckpt="B")]
    lone, seen, started = data.changes("at-most-once", audit, rows, [command(5, "crash", 4_000, 4_001)])  # newest first
    assert (started["ts"], started["lost"], seen["ts"], seen["lost"]) == (6_000, 0, 11_000, 40)
    assert [e["kind"] for e in seen["evidence"]] == ["new-checkpoint"] and [c["id"] for c in seen["causes"]] == [5]
    said = text.change(seen)
    assert said.startswith("**") and "lost +40: started a new checkpoint" in said and "crash #5 on usage" in said
    assert "no fault recorded" not in said
    # a later loss with nothing of its own is not the same checkpoint's again
    assert (lone["ts"], lone["lost"], lone["evidence"]) == (16_000, 5, []) and "no fault recorded" in text.change(lone)


def test_upstream_duplicates_are_the_input_s_own():
    audit = [sample(1_000, 4), sample(6_000, 5, upstream=3)]
    [change] = data.changes("at-least-once", audit, [handed(5, ledger.APPLIED, 5_500)], [])
    said = text.change(change)
    assert "upstream +3" in said and "came twice in the input topic" in said and "no fault recorded" not in said


def test_a_replay_without_a_recorded_fault_is_told_without_a_cause():
    audit = [sample(1_000, 4), sample(20_000, 5, replayed=50)]
    rows = [handed(5, ledger.APPLIED, 5_500), handed(5, ledger.APPLIED, 15_000)]
    [change] = data.changes("at-least-once", audit, rows, [])
    assert text.change(change).endswith("the replay counted its 50 records again — no fault recorded.")


def test_a_task_failure_aimed_at_another_query_explains_nothing():
    audit = [sample(1_000, 4), sample(6_000, 5, lost=50)]
    rows = [handed(5, ledger.DROPPED, 5_500, reason="task-failure injected")]
    events = [command(9, "task-failure", 5_000, 5_600, guarantee="exactly-once")]
    [change] = data.changes("at-most-once", audit, rows, events)
    assert change["causes"] == [] and "no fault recorded" in text.change(change)
    events = [command(9, "task-failure", 5_000, 5_600, guarantee="at-most-once")]
    assert data.changes("at-most-once", audit, rows, events)[0]["causes"][0]["id"] == 9


def test_batches_beyond_the_committed_one_are_not_counted_yet():
    """A batch applied but not committed at a sample enters the cut only at the commit's sample."""
    audit = [sample(1_000, 4), sample(6_000, 4), sample(11_000, 5, replayed=50)]
    rows = [handed(5, ledger.APPLIED, 5_500), handed(5, ledger.APPLIED, 9_000)]
    changes = data.changes("at-least-once", audit, rows, [command(2, "crash", 5_600, 5_601)])
    assert [c["ts"] for c in changes] == [11_000] and changes[0]["causes"][0]["fault"] == "crash"


def test_empty_store(store):
    assert data.latest(store).empty and data.audit_series(store, NOW).empty and data.fault_marks(store, NOW).empty
    assert all(v == [] for v in data.stories(store, NOW).values())
