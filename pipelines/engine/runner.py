"""Runs a job's streaming queries, restarting a failed one from its checkpoint (pipelines.restarts).

Both jobs use it. A query stopped while a newer instance holds the job's lease was stopped by
Spark's own guard (one run per checkpoint): this instance is a zombie and exits 4 instead of
restarting it. Repeated failures hand over to the supervisor (exit 1).
"""
from __future__ import annotations

import logging
import threading
import time

from controlplane import fencing
from pipelines.restarts import Backoff, first_line

log = logging.getLogger(__name__)

EXIT_FAILED, EXIT_FENCED, EXIT_SUPERSEDED = 1, 3, 4


class QueryRunner:
    def __init__(self, job: str, db, epoch: int, starters: dict, stopping: threading.Event,
                 backoff: Backoff | None = None, finished=lambda queries: False):
        """`starters`: {query name: start(restart: bool) -> StreamingQuery}. `finished`: whether the
        job is done (an availableNow run whose queries all ended)."""
        self.job, self.db, self.epoch = job, db, epoch
        self.starters, self.stopping, self.finished = starters, stopping, finished
        self.backoff = backoff or Backoff(base=2.0, cap=30.0, window_s=300.0, max_failures=5)
        self.queries: dict[str, object] = {}

    def start(self) -> None:
        for name, start in self.starters.items():
            self.queries[name] = start(restart=False)

    def watch(self) -> int:
        """Until stopped: restart failed queries; the exit code the job should end with."""
        while not self.stopping.wait(0.5):
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
                delay = self.backoff.failed()
                if delay is None:
                    log.error("%s failed %d times in %.0f s, giving up: %s", name,
                              self.backoff.recent_failures, self.backoff.window_s, error)
                    return EXIT_FAILED
                log.warning("%s failed (%s); restarting it from its checkpoint in %g s", name, error, delay)
                if self.stopping.wait(delay):
                    return 0
                self.queries[name] = self.starters[name](restart=True)
        return 0

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
