"""The three guarantees as policy objects, on a real SQLite store and its sink ledger, without Spark.

Each test hands `Guarantee.write` the batches a query would (a `ledger.Batch` named by its
checkpoint and batch id, with its Kafka range) and reads back what a user would see: the counts
in `usage_counts` and the ledger rows in `sink_batches`.
"""
from __future__ import annotations

import pytest

from controlplane import fencing, ledger
from infra.config import load
from infra.contracts import GUARANTEES, RT_GUARANTEES
from pipelines import guarantees as g
from pipelines.fraud import seed
from pipelines.guarantees import SinkDown, SinkGate

AMO, ALO, EO = (g.policy(name) for name in GUARANTEES)
CHECKPOINT = "3f1c-query-id"


class Clock:
    """A hand-moved clock for SinkGate; `step` moves it on by itself at every reading."""

    def __init__(self, step: float = 0.0):
        self.t, self.step = 1000.0, step

    def __call__(self):
        self.t += self.step
        return self.t


def batch(policy, batch_id, processed, fraud=0, checkpoint=CHECKPOINT):
    """Batch `batch_id` of the policy's query: offsets 100*id .. 100*id + processed on partition 0."""
    start = 100 * batch_id
    return ledger.Batch(policy.query, checkpoint, batch_id, processed, fraud,
                        start_offsets={"decisions": {"0": start}},
                        end_offsets={"decisions": {"0": start + processed}})


def outcomes(store, policy):
    return [(r["batch_id"], r["outcome"]) for r in ledger.batches(store, policy.query)]


@pytest.fixture
def epoch(store):
    return fencing.take_lease(store, g.JOB)


def test_one_policy_per_guarantee_and_a_clear_error_for_another_name():
    assert [p.name for p in (AMO, ALO, EO)] == list(GUARANTEES)
    assert [p.query for p in (AMO, ALO, EO)] == [f"usage-{name}" for name in GUARANTEES]
    assert (AMO.keeps_checkpoint, ALO.keeps_checkpoint, EO.keeps_checkpoint) == (False, True, True)
    assert (AMO.starting_offsets, ALO.starting_offsets, EO.starting_offsets) == ("latest", "earliest", "earliest")
    assert [p.dedupes_input for p in (AMO, ALO, EO)] == [False, False, True]
    with pytest.raises(ValueError, match="no guarantee 'twice'.*exactly-once"):
        g.policy("twice")


def test_exactly_once_applies_each_batch_once_and_skips_a_replay(store, epoch):
    assert EO.write(store, batch(EO, 0, 10, 2), epoch) == ledger.APPLIED
    assert EO.write(store, batch(EO, 1, 5, 1), epoch) == ledger.APPLIED
    assert EO.write(store, batch(EO, 1, 5, 1), epoch) == ledger.SKIPPED  # replay after a crash
    assert g.counts(store) == {"exactly-once": {"processed": 15, "fraud": 3}}
    assert outcomes(store, EO) == [(0, "applied"), (1, "applied"), (1, "skipped")]
    skipped = ledger.batches(store, EO.query)[-1]
    assert "already applied" in skipped["reason"] and skipped["checkpoint_id"] == CHECKPOINT
    assert skipped["epoch"] == epoch


def test_exactly_once_names_a_batch_by_its_checkpoint(store, epoch):
    """Batch ids restart at 0 with a new checkpoint: batch 0 of another checkpoint is another batch."""
    EO.write(store, batch(EO, 0, 10), epoch)
    assert EO.write(store, batch(EO, 0, 4, checkpoint="another-query-id"), epoch) == ledger.APPLIED
    assert g.counts(store)["exactly-once"]["processed"] == 14


def test_exactly_once_refuses_a_batch_id_reused_over_another_range(store, epoch):
    """A restored checkpoint plans batch 1 again over 100..130 while the store applied it over
    100..105: the write is refused with one sentence, changing nothing, never skipped."""
    EO.write(store, batch(EO, 0, 10), epoch)
    EO.write(store, batch(EO, 1, 5), epoch)
    with pytest.raises(ledger.ReusedBatch, match=r"usage-exactly-once: batch 1 of checkpoint .* now covers "
                                                 r"decisions 0:100-130, but the store applied batch 1 of that "
                                                 r"checkpoint over decisions 0:100-105, .*--reset-sink"):
        EO.write(store, batch(EO, 1, 30), epoch)
    assert g.counts(store)["exactly-once"]["processed"] == 15
    assert outcomes(store, EO) == [(0, "applied"), (1, "applied")]


def test_at_least_once_applies_a_replay_twice_and_the_ledger_shows_both(store, epoch):
    assert ALO.write(store, batch(ALO, 0, 10, 2), epoch) == ledger.APPLIED
    assert ALO.write(store, batch(ALO, 0, 10, 2), epoch) == ledger.APPLIED
    assert g.counts(store) == {"at-least-once": {"processed": 20, "fraud": 4}}
    assert outcomes(store, ALO) == [(0, "applied"), (0, "applied")]


def test_the_ledger_keeps_each_batch_s_kafka_range(store, epoch):
    AMO.write(store, batch(AMO, 3, 7), epoch)
    [row] = ledger.batches(store, AMO.query)
    assert (row["processed"], row["start_offsets"], row["end_offsets"]) == \
           (7, '{"decisions": {"0": 300}}', '{"decisions": {"0": 307}}')


def test_sink_down_drops_at_most_once_with_the_reason_and_fails_the_others(store, epoch):
    clock = Clock()
    gate = SinkGate(clock=clock)
    gate.take_down(5)
    assert AMO.write(store, batch(AMO, 3, 7, 1), epoch, gate) == ledger.DROPPED
    for durable in (ALO, EO):  # they would retry; `stop` says the job is stopping, so the error surfaces
        with pytest.raises(SinkDown):
            durable.write(store, batch(durable, 3, 7, 1), epoch, gate, stop=lambda: True)
    assert g.counts(store) == {}
    assert g.dropped(store) == {"batches": 1, "processed": 7, "fraud": 1}
    [drop] = ledger.batches(store, AMO.query)
    assert drop["outcome"] == "dropped" and "rejects writes" in drop["reason"]
    assert ledger.batches(store, EO.query) == ledger.batches(store, ALO.query) == []  # a failed write leaves no record
    clock.t += 5
    assert AMO.write(store, batch(AMO, 4, 2), epoch, gate) == ledger.APPLIED
    assert EO.write(store, batch(EO, 3, 7, 1), epoch, gate) == ledger.APPLIED
    assert g.counts(store) == {"at-most-once": {"processed": 2, "fraud": 0},
                               "exactly-once": {"processed": 7, "fraud": 1}}
    assert g.dropped(store)["batches"] == 1  # the applied batch is not a drop


def test_a_durable_write_waits_out_the_outage_and_lands_once(store, epoch):
    gate = SinkGate(clock=Clock(step=1.0))  # every look at the clock is a second later
    gate.take_down(3)
    assert ALO.write(store, batch(ALO, 0, 9, 2), epoch, gate) == ledger.APPLIED
    assert g.counts(store) == {"at-least-once": {"processed": 9, "fraud": 2}}
    assert outcomes(store, ALO) == [(0, "applied")]


def test_a_batch_that_failed_upstream_is_dropped_by_at_most_once_and_raised_by_the_others(store, epoch):
    AMO.failed(store, batch(AMO, 0, 4), epoch, RuntimeError("task failed"))
    assert g.dropped(store)["processed"] == 4 and g.counts(store) == {}
    assert ledger.batches(store, AMO.query)[0]["reason"] == "task failed"
    for durable in (ALO, EO):
        with pytest.raises(RuntimeError, match="task failed"):
            durable.failed(store, batch(durable, 0, 4), epoch, RuntimeError("task failed"))
    assert ledger.batches(store, ALO.query) == ledger.batches(store, EO.query) == []


def test_other_write_errors_are_dropped_by_at_most_once_only(store, epoch):
    class Broken(SinkGate):
        def check(self):
            raise OSError("disk I/O error")

    assert AMO.write(store, batch(AMO, 0, 3), epoch, Broken()) == ledger.DROPPED
    assert "disk I/O error" in ledger.batches(store, AMO.query)[0]["reason"]
    with pytest.raises(OSError):
        EO.write(store, batch(EO, 0, 3), epoch, Broken())  # not SinkDown: no retry, the batch fails
    assert g.counts(store) == {}


def test_a_stale_epoch_is_fenced_for_every_guarantee_and_changes_nothing(store, epoch):
    newer = fencing.take_lease(store, g.JOB)
    assert newer > epoch
    for policy in (AMO, ALO, EO):
        with pytest.raises(fencing.FencedError, match=f"epoch {epoch} rejected"):
            policy.write(store, batch(policy, 0, 1), epoch)
    assert g.counts(store) == {}
    assert store["sink_batches"].count == 0  # at-most-once did not turn the rejection into a drop
    assert EO.write(store, batch(EO, 0, 1), newer) == ledger.APPLIED  # the batch is not marked applied
    assert g.counts(store)["exactly-once"]["processed"] == 1


def test_retry_until_written_backs_off_while_the_sink_is_down():
    attempts, sleeps = [], []

    def write():
        attempts.append(1)
        if len(attempts) < 5:
            raise SinkDown("down")
        return "ok"

    assert g.retry_until_written(write, sleep=sleeps.append, first_delay=0.1, max_delay=0.3) == "ok"
    assert sleeps == [0.1, 0.2, 0.3, 0.3]
    with pytest.raises(SinkDown):
        g.retry_until_written(lambda: (_ for _ in ()).throw(SinkDown("x")), stop=lambda: True)


def test_other_errors_are_not_retried():
    calls = []

    def write():
        calls.append(1)
        raise ValueError("disk full")

    with pytest.raises(ValueError):
        g.retry_until_written(write, sleep=lambda _: None)
    assert len(calls) == 1


# --- the fraud job's real-time path -------------------------------------------------------------

RT_AMO, RT_ALO = (g.rt_policy(name) for name in RT_GUARANTEES)
NOW = 1_800_000_000_000
COMMITTED = {0: 80, 1: 35}                                  # the path's own last committed offsets
SNAPSHOT = seed.Snapshot(as_of=NOW - 5_000, ends={0: 90, 1: 30})  # the seed's cut


def restart_plan(policy):
    return seed.plan(SNAPSHOT, {0: 0, 1: 0}, {0: 100, 1: 40}, "latest", policy.resume_from(COMMITTED),
                     1_000, NOW)


def test_one_real_time_policy_per_real_time_guarantee_and_no_exactly_once():
    assert [p.name for p in (RT_AMO, RT_ALO)] == list(RT_GUARANTEES) == ["at-most-once", "at-least-once"]
    assert (RT_AMO.resends, RT_ALO.resends) == (False, True)
    assert f"{RT_ALO}" == "at-least-once"  # logs and the store name it
    with pytest.raises(ValueError, match="no real-time guarantee 'exactly-once'.*at-most-once, at-least-once"):
        g.rt_policy("exactly-once")


def test_at_least_once_restarts_back_at_its_own_commit_and_sends_all_it_reads():
    plan = restart_plan(RT_ALO)
    assert plan.starts == {0: 80, 1: 30}   # partition 0 back to its commit; 1's seed cut is earlier still
    assert plan.folds == {0: 90, 1: 30}    # the profiles fold from the seed either way
    assert RT_ALO.sends_from(NOW) is None


def test_at_most_once_restarts_at_the_seed_and_sends_only_what_came_after_its_start():
    plan = restart_plan(RT_AMO)
    assert plan.starts == plan.folds == {0: 90, 1: 30}
    assert RT_AMO.sends_from(NOW) == NOW


def test_the_fraud_job_resolves_its_real_time_guarantee_once_from_its_arguments():
    from pipelines.fraud.job import parse_args

    assert parse_args(["--guarantee", "at-most-once"], load({})).guarantee is RT_AMO
    assert parse_args([], load({"FRAUD_RT_GUARANTEE": "at-least-once"})).guarantee is RT_ALO
    with pytest.raises(SystemExit):
        parse_args([], load({"FRAUD_RT_GUARANTEE": "exactly-once"}))


def test_the_json_parse_is_one_of_two_or_a_clear_error():
    assert load({}).json_parse == "scan" and load({"JSON_PARSE": "spark"}).json_parse == "spark"
    with pytest.raises(SystemExit, match="JSON_PARSE must be one of scan, spark, not 'regex'"):
        load({"JSON_PARSE": "regex"})
