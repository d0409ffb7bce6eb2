"""Runs a job's streaming queries, restarting a failed one from its checkpoint (pipelines.restarts).

Both jobs use it. A query stopped while a newer instance holds the job's lease was stopped by
Spark's own guard (one run per checkpoint): this instance is a zombie and exits 4 instead of
restarting it. Repeated failures of one query hand over to the supervisor (exit 1), except for
the queries named `retry_forever` (the fraud job's dead letters: they must never stop decisions),
which are retried with the capped back-off for as long as it takes.

Queries named `deferred` start only once the first query has finished a batch (or after
`defer_max_s`): on two cores, a takeover's first batch of the decisions query otherwise shares
the CPU with the dead-letter query's first batch, and the recovery is the decisions' batch.

Every failure is recorded in the store (`query_failures`: the batch, its Kafka range, the error).
With a `Poison` policy, the poison-batch rule (`pipelines.engine.poison`) applies: the Nth
identical failure of a batch calls the job's quarantine for that query, which dead-letters the
records that fail on their own; the query is then restarted at once, without them.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from controlplane import fencing
from controlplane.clock import now_ms
from infra.contracts import EXIT_FAILED, EXIT_SUPERSEDED
from pipelines.engine import checkpoints
from pipelines.engine.poison import Failure, Recorder, Streaks, signature
from pipelines.restarts import Backoff, first_line

log = logging.getLogger(__name__)



@dataclass
class Poison:
    """The poison-batch rule as a job applies it.

    `quarantine`: {query name: quarantine(failure, in_a_row) -> bool}, True when it dead-lettered
    records of the batch (the query then restarts without them), False when no record fails on
    its own. `checkpoints`: {query name: checkpoint folder}, where a failed batch's id and range
    are read. `recorder`: wraps the queries' foreachBatch handlers so their own exception is the
    signature.
    """
    streaks: Streaks
    checkpoints: dict[str, Path]
    quarantine: dict[str, Callable[[Failure, int], bool]] = field(default_factory=dict)
    recorder: Recorder = field(default_factory=Recorder)


def _backoff(forever: bool = False) -> Backoff:
    return Backoff(base=2.0, cap=30.0, window_s=300.0, max_failures=None if forever else 5)


class QueryRunner:
    def __init__(self, job: str, db, epoch: int, starters: dict, stopping: threading.Event,
                 backoff: Callable[[], Backoff] | None = None, finished=lambda queries: False,
                 poison: Poison | None = None, retry_forever: tuple[str, ...] = (),
                 deferred: tuple[str, ...] = (), defer_max_s: float = 30.0, tick=None):
        """`starters`: {query name: start(restart: bool) -> StreamingQuery}, the first one the job's
        main query. `finished`: whether the job is done (an availableNow run whose queries all
        ended). `backoff`: makes each query's own back-off (default: 2 s doubled up to 30 s, give
        up after 5 failures in 5 minutes). `deferred`: queries started after the first one's first
        batch (not for availableNow runs: `finished` sees only started queries). `tick(runner)`:
        the job's own work between two looks at the queries (a model switch)."""
        self.tick = tick
        self.job, self.db, self.epoch = job, db, epoch
        self.starters, self.stopping, self.finished = starters, stopping, finished
        self.deferred = [name for name in starters if name in deferred]
        self.defer_until = 0.0
        self.defer_max_s = defer_max_s
        self.poison = poison
        self.backoffs = {name: _backoff(forever=True) if name in retry_forever else (backoff or _backoff)()
                         for name in starters}
        self.queries: dict[str, object] = {}

    def start(self) -> None:
        for name, start in self.starters.items():
            if name not in self.deferred:
                self.queries[name] = start(restart=False)
        self.defer_until = time.monotonic() + self.defer_max_s

    def start_deferred(self) -> None:
        """Start the deferred queries once the main query has finished a batch (or waited long enough)."""
        if not self.deferred:
            return
        main = next(iter(self.queries.values()), None)
        try:
            ready = main is None or main.lastProgress is not None or not main.isActive
        except Exception:  # noqa: BLE001 - the query is gone: do not hold the others back
            ready = True
        if ready or time.monotonic() >= self.defer_until:
            for name in self.deferred:
                log.info("starting %s after the first batch of the main query", name)
                self.queries[name] = self.starters[name](restart=False)
            self.deferred = []

    def watch(self) -> int:
        """Until stopped: restart failed queries; the exit code the job should end with."""
        while not self.stopping.wait(0.5):
            self.start_deferred()
            if self.tick is not None:
                self.tick(self)
            if self.finished(list(self.queries.values())):
                return 0
            for name, query in list(self.queries.items()):
                if query.isActive or (query.exception() is None and self.finished([query])):
                    continue
                error = first_line(query.exception()) if query.exception() else "stopped"
                newer = fencing.current_epoch(self.db, self.job)
                if newer > self.epoch:
                    log.error("%s stopped by Spark (%s); epoch %s now owns the job, so this instance "
                              "(epoch %s) exits without restarting it", name, error, newer, self.epoch)
                    return EXIT_SUPERSEDED
                failure = self.failure(name, query, error)
                if self.quarantined(failure):
                    log.warning("%s: batch %s was poison; its failing records are dead-lettered, "
                                "restarting the query without them", name, failure.batch_id)
                    self.queries[name] = self.starters[name](restart=True)
                    continue
                backoff = self.backoffs[name]
                delay = backoff.failed()
                if delay is None:
                    self.record(failure, "give up")
                    log.error("%s failed %d times in %.0f s, giving up: %s", name,
                              backoff.recent_failures, backoff.window_s, error)
                    return EXIT_FAILED
                log.warning("%s failed (%s); restarting it from its checkpoint in %g s", name, error, delay)
                if self.stopping.wait(delay):
                    return 0
                self.queries[name] = self.starters[name](restart=True)
        return 0

    # -- the poison-batch rule ------------------------------------------------------------------
    def failure(self, name: str, query, error: str) -> Failure:
        """The failure as the rule compares it: the batch Spark planned and did not commit (its id
        and range from the checkpoint's offset log), and the handler's own exception when the
        failure came from it (else the first telling line of Spark's)."""
        folder = self.poison.checkpoints.get(name) if self.poison else None
        batch_id, start, end = None, {}, {}
        if folder is not None:
            pos = checkpoints.position(folder)
            if pos.uncommitted:
                batch_id = pos.planned_batch
                start, end = checkpoints.batch_range(folder, batch_id)
        raised = self.poison.recorder.take(name) if self.poison else None
        if raised is not None and raised[0] == batch_id:
            error = signature(raised[1])
        return Failure(name, batch_id, start, end, error)

    def quarantined(self, failure: Failure) -> bool:
        """Apply the rule to one failure (and record it): True when the batch was poison and its
        failing records were dead-lettered."""
        if self.poison is None:
            self.record(failure, "restart")
            return False
        n = self.poison.streaks.observe(failure)
        quarantine = self.poison.quarantine.get(failure.query)
        if quarantine is None or not self.poison.streaks.poison(failure, n):
            self.record(failure, "restart", n)
            return False
        log.warning("%s failed %d times in a row on batch %s (%s): poison batch", failure.query, n,
                    failure.batch_id, failure.error)
        try:
            done = quarantine(failure, n)
        except fencing.FencedError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed quarantine is retried at the next failure
            log.warning("%s: quarantine of batch %s failed (%s); it is tried again at the next failure",
                        failure.query, failure.batch_id, first_line(exc))
            self.record(failure, "quarantine failed", n)
            return False
        self.record(failure, "quarantine" if done else "not reproduced", n)
        if done:
            self.poison.streaks.clear(failure.query)
            self.backoffs[failure.query] = _backoff(self.backoffs[failure.query].max_failures is None)
        return done

    def record(self, failure: Failure, action: str, in_a_row: int = 1) -> None:
        """One row of `query_failures`; a busy store must not stop the restart."""
        folder = self.poison.checkpoints.get(failure.query) if self.poison else None
        try:
            self.db["query_failures"].insert({
                "job": self.job, "query": failure.query,
                "checkpoint_id": checkpoints.query_id(folder) if folder else None,
                "batch_id": failure.batch_id, "start_offsets": json.dumps(failure.start),
                "end_offsets": json.dumps(failure.end), "error": failure.error, "in_a_row": in_a_row,
                "action": action, "epoch": self.epoch, "ts": now_ms()})
        except Exception as exc:  # noqa: BLE001
            log.warning("could not record the failure of %s: %s", failure.query, exc)

    def restart_between_batches(self, name: str, between_batches_s: float = 20.0) -> None:
        """Stop one query when it is idle between two triggers (a running batch would be cancelled
        and replayed: exactly once all the same, but decided twice), and start it again from its
        checkpoint with whatever its starter builds now."""
        query = self.queries[name]
        deadline = time.monotonic() + between_batches_s
        while query.isActive and _trigger_active(query) and time.monotonic() < deadline:
            time.sleep(0.005)
        query.stop()
        self.queries[name] = self.starters[name](restart=True)

    def stop(self, between_batches_s: float = 20.0) -> None:
        """Stop each query between two batches when it can: `stop()` cancels a running batch
        (which the next run then replays), so wait up to `between_batches_s` for the query to be
        idle between triggers first."""
        deadline = time.monotonic() + between_batches_s
        for query in self.queries.values():
            try:
                while query.isActive and _trigger_active(query) and time.monotonic() < deadline:
                    time.sleep(0.02)
                query.stop()
            except Exception:  # noqa: BLE001 - stopping anyway
                pass


def _trigger_active(query) -> bool:
    try:
        return bool(query.status.get("isTriggerActive"))
    except Exception:  # noqa: BLE001 - not a StreamingQuery (the real-time wrapper), or gone
        return False
