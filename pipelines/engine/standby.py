"""The lease side of a job process: a warm standby waits for it, an active instance keeps it.

A standby (`--standby`) builds its SparkSession and plans first, then waits: it takes the lease
(the next fencing epoch) when the supervisor promotes it (SIGUSR1, sent when it sees the active
exit) or when the active's heartbeat stops for LEASE_TTL_SECONDS and the lease's holder is gone
(the supervisor is not there to promote it). A holder that still runs is starved, not gone: on a
loaded machine its heartbeat can fall 5 s behind, and a standby that took over then cost a
needless failover and left the job without a standby for the next one (issue 36 item 3).
The active renews its lease every second; when it finds a newer epoch there it has been
superseded (a takeover while it was frozen, starved or cut off) and it exits at once (4): its
writes would be fenced, but one with no batch to write would otherwise live on with nothing to
stop it.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading

from controlplane import fencing
from controlplane.clock import now_ms
from controlplane.store import connect

log = logging.getLogger(__name__)


PROMOTED = threading.Event()


def listen() -> None:
    """Call first thing in a standby's main thread: a promotion that comes while the session is
    still starting is kept, not fatal (SIGUSR1's default action ends the process)."""
    signal.signal(signal.SIGUSR1, lambda *_: PROMOTED.set())


def wait_for_takeover(db, job: str, ttl_s: float, stopping: threading.Event) -> bool:
    """Block until this standby should become active; False when it is stopped first."""
    db.conn.execute("INSERT INTO standbys (job, pid, ready_at) VALUES (?, ?, ?) ON CONFLICT(job) DO UPDATE SET "
                    "pid = excluded.pid, ready_at = excluded.ready_at", (job, os.getpid(), now_ms()))
    log.info("%s: standby ready, waiting for the lease", job)
    told = False
    while not stopping.is_set():
        if PROMOTED.wait(0.1):
            log.warning("%s: promoted by the supervisor: taking over", job)
            return True
        age = fencing.lease_age_ms(db, job)
        if age is None or age > ttl_s * 1000:
            holder = fencing.holder(db, job)
            if age is not None and holder_runs(holder):
                if not told:  # once per stale spell
                    log.warning("%s: the lease is %.1f s old but its holder %s still runs (starved, not gone): "
                                "waiting for the supervisor", job, age / 1000, holder)
                told = True
                continue
            log.warning("%s: the lease is %s: taking over", job, "free" if age is None else f"{age / 1000:.1f} s old")
            return True
        told = False
    return False


def holder_runs(holder: str | None) -> bool:
    """Whether the lease holder's process ("host:pid") still runs on this host; False when it is
    gone, or on another host (there its heartbeat is all there is to go by)."""
    host, _, pid = (holder or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it runs
        return True


def exit_superseded(job: str, epoch: int, newer: int) -> None:
    """The process ends at once (exit 4, EXIT_SUPERSEDED): a newer instance owns the job."""
    from pipelines.engine.runner import EXIT_SUPERSEDED

    log.error("%s: epoch %s no longer holds the lease (the job's epoch is %s): a newer instance took over while "
              "this one was stopped or starved; exiting before it plans or writes another batch", job, epoch, newer)
    logging.shutdown()
    os._exit(EXIT_SUPERSEDED)


class Heartbeat(threading.Thread):
    """Renews the lease every `interval` seconds while the job runs; when a newer epoch holds it,
    calls `on_lost(job, epoch, newer epoch)`, by default `exit_superseded`. A process frozen past
    a takeover (the `zombie` fault, a long pause) thus ends within a beat of waking, whether or
    not a batch of it reaches its fenced write."""

    def __init__(self, store_path, job: str, epoch: int, interval: float = 1.0, on_lost=None):
        super().__init__(name=f"{job}-lease", daemon=True)
        self.store_path, self.job, self.epoch, self.interval = store_path, job, epoch, interval
        self.on_lost = on_lost or exit_superseded
        self.halt = threading.Event()

    def run(self) -> None:
        db = connect(self.store_path)
        while not self.halt.wait(self.interval):
            try:
                if not fencing.renew(db, self.job, self.epoch):
                    self.on_lost(self.job, self.epoch, fencing.current_epoch(db, self.job))
                    return
            except Exception as exc:  # noqa: BLE001 - a busy store: try again next beat
                log.warning("%s: lease renewal failed: %s", self.job, exc)

    def stop(self, release: bool = True) -> None:
        self.halt.set()
        if release:
            try:
                fencing.release(connect(self.store_path), self.job, self.epoch)
            except Exception:  # noqa: BLE001 - the lease then simply expires
                pass
