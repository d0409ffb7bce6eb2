"""The real-time fraud path's guarantee under a real SIGKILL: `python -m pipelines.fraud --mode
realtime --guarantee G` on the real broker, fed while it is killed and restarted. Asserted on the
topics themselves (decisions-rt and the exactly-once decisions, read_committed): at-most-once
decides only what reaches Kafka after its restart and never replays (what came while it was down
stays undecided by it, the accurate path decides it); at-least-once reads back to its last commit
and replays (what it had decided is sent again, and nothing is left undecided).

The two guarantees run side by side, each on its own topics, job and checkpoint: their job starts
(a Spark session each, twice) overlap instead of following one another."""
from __future__ import annotations

import threading
import time
import traceback

from bench.harness.fraud_rt import Feeder, RealtimeRun, read_stamps, recovered
from bench.harness.jobs import wait_for

RATE = 20.0
IDLE_MS = 500  # a topic read once the feed stopped ends after this long without a record (the last ones: 2 s)
GUARANTEES = ("at-most-once", "at-least-once")


def test_a_killed_real_time_path_skips_or_replays(kafka, settings, tmp_path):
    failed: dict[str, str] = {}

    def run(guarantee):
        try:
            killed_and_restarted(guarantee, settings, tmp_path / guarantee)
        except BaseException:  # noqa: BLE001 - reported below, per guarantee
            failed[guarantee] = traceback.format_exc()

    threads = [threading.Thread(target=run, args=(g,), name=g) for g in GUARANTEES]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failed, "\n".join(f"{g}:\n{tb}" for g, tb in failed.items())


def killed_and_restarted(guarantee, settings, work):
    run = RealtimeRun(settings, guarantee, work)
    feeder = Feeder(settings, run.tx, RATE)
    started = int(time.time() * 1000)  # the first seed's cut is at or after this
    try:
        run.start()
        run.prime()
        primed = run.rt_end()
        feeder.start()
        # the fast path decides the feed for a while (2 s of it) before the kill ...
        wait_for(lambda: run.rt_end() >= primed + 2 * RATE, 60, "the real-time path to decide the feed")
        before = run.rt_end()
        killed_at = run.kill()
        run.start()
        recovered(run, before, timeout=150)
        # ... and fed on for a second once it decides again (each one decided after it is waited for below)
        mark = len(feeder.sent) + int(RATE)
        wait_for(lambda: len(feeder.sent) > mark, 60, "a second of feed after the restart")
        feeder.stop()
        fed = list(feeder.sent)
        # the accurate companion decides every transaction exactly once, whatever the fast path did
        wait_for(lambda: set(fed) <= {t for t, _ in read_stamps(settings, run.dec, IDLE_MS)}, 120, "the stateful path")
        if guarantee == "at-least-once":
            wait_for(lambda: set(fed) <= {t for t, _ in read_stamps(settings, run.rt, IDLE_MS)}, 30, "the replay")
        else:  # what came after the restart is decided by the fast path: the last one fed too
            wait_for(lambda: fed[-1] in {t for t, _ in read_stamps(settings, run.rt, IDLE_MS)}, 30,
                     "the real-time path to decide the last transaction fed")
        docs: list[dict] = []
        rt = read_stamps(settings, run.rt, docs=docs)
        runs = run.runs()
        restarted_at = run.restarted_at(killed_at)
        assert restarted_at is not None and [(g, resumed) for _, g, resumed in runs] == [
            (guarantee, 0), (guarantee, int(guarantee == "at-least-once"))]
        decided_before = {t for t, at in rt if at < restarted_at}
        resent = [t for t, at in rt if at >= restarted_at and t in decided_before]
        undecided = [t for t in fed if t not in {t for t, _ in rt}]
        assert decided_before, "the real-time path decided nothing before the kill"
        if guarantee == "at-most-once":
            assert resent == [], f"at-most-once replayed {len(resent)} decisions"
            assert undecided, "at-most-once skipped nothing, yet transactions arrived while it was down"
        else:
            assert undecided == []
            # its one real-time batch ran from the start: the restart re-reads it from its start offsets
            assert set(resent) >= {t for t in decided_before if t in set(fed)}, \
                "at-least-once did not resend what it had decided in its unfinished batch"
        decisions = [t for t, _ in read_stamps(settings, run.dec) if not t.startswith("prime-")]
        assert sorted(decisions) == sorted(fed)       # exactly once, the gaps filled
        # every fast decision says how old its card's profile was: the newest history it had folded
        # (the card's previous transaction, or the seed's cut, never before the first start). The live
        # profiles start from the stateful path's snapshot and fold on from its offsets (the restarted
        # JVM too), so no profile is older than the card's previous decided transaction: no hole
        assert docs and all(isinstance(d.get("profile_age_ms"), int) for d in docs)
        holes = []
        for d in docs:
            earlier = [e["produced_at"] for e in docs if e["card_id"] == d["card_id"] and e["produced_at"] < d["produced_at"]]
            newest = max(earlier, default=started)
            if d["profile_age_ms"] > d["decided_at"] - newest + 1_000:
                holes.append(d)
        assert not holes, f"{len(holes)} decisions used a profile with a hole, for instance {holes[0]}"
    finally:
        feeder.stop()
        run.stop(keep=True)
        run.delete_topics()
