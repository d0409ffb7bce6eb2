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
import time
from typing import Callable

from controlplane import fencing
from controlplane.clock import now_ms
from controlplane.store import connect
from infra.priority import own_group_nice, set_group_nice, threads

log = logging.getLogger(__name__)


PROMOTED = threading.Event()
_STEPPED_BACK = {"by": 0, "base": 0}  # the niceness a standby took (`step_back`) and what it had


def listen(nice: int = 0) -> None:
    """Call first thing in a standby's main thread: a promotion that comes while the session is
    still starting is kept, not fatal (SIGUSR1's default action ends the process); and the
    standby steps back (`step_back`) by `nice` before its Spark JVM starts."""
    def promoted(*_):
        PROMOTED.set()
        come_forward()  # now, not once the session is up: what is left of its start is the job's

    signal.signal(signal.SIGUSR1, promoted)
    step_back(nice)


def may_come_back(by: int) -> bool:
    """Whether this process may raise a thread's priority again after lowering it by `by`: tried on
    a thread of its own (Linux: a thread's niceness is its own), so nothing else is touched."""
    result = []

    def attempt():
        try:
            base = os.getpriority(os.PRIO_PROCESS, 0)
            os.setpriority(os.PRIO_PROCESS, 0, min(19, base + by))
            os.setpriority(os.PRIO_PROCESS, 0, base)
            result.append(True)
        except OSError:
            result.append(False)

    t = threading.Thread(target=attempt, name="nice-probe")
    t.start()
    t.join()
    return bool(result and result[0])


def step_back(by: int) -> int:
    """A standby's start: `by` nicer, so its JVM start, warm-up and rehearsal take the CPU only when
    the active jobs leave it (on two cores, right after the standbys started, the demo's first
    minute went 10 s without a decision); `come_forward` undoes it at a takeover. Two levers:
    - its session's scheduling group, when it leads its session (infra/priority.py): with Linux's
      autogroups on, a thread's niceness weighs only against its own session's threads, and the
      supervisor starts each process in a session of its own; with its threads alone niced, a
      standby took as much CPU as an active job (2026-11-30). A group's niceness goes back up to
      0 without a privilege.
    - this thread's niceness (and so that of the Spark JVM and workers it starts after): what
      counts when autogroups are off; only when it can be undone (root, or RLIMIT_NICE allows it).
    Returns the niceness taken (0: neither could be)."""
    if by <= 0 or not hasattr(os, "setpriority"):
        return 0
    taken = 0
    group = own_group_nice()
    if group is not None and group < 19 and set_group_nice(min(19, group + by)):
        _STEPPED_BACK.update(group=group)
        log.info("standby: its session's scheduling group at niceness %d until it takes over", min(19, group + by))
        taken = by
    if not may_come_back(by):
        if not taken:
            log.warning("the standby runs at its priority: lowering it by %d could not be undone at a takeover "
                        "(no CAP_SYS_NICE, RLIMIT_NICE too low, and no scheduling group of its own)", by)
        return taken
    base = os.getpriority(os.PRIO_PROCESS, 0)
    for tid in threads(os.getpid()):  # the threads imports started (a BLAS pool) too
        try:
            os.setpriority(os.PRIO_PROCESS, tid, min(19, base + by))
        except OSError:  # a thread that ended meanwhile
            continue
    _STEPPED_BACK.update(by=by, base=base)
    log.info("standby: niceness %d until it takes over", min(19, base + by))
    return by


def process_tree(root: int) -> list[int]:
    """`root` and every process under it (its Spark JVM, the JVM's Python workers), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def come_forward() -> int:
    """At a takeover: the session's scheduling group back to its niceness, then every thread of the
    standby's process tree back by the niceness `step_back` took (never below what it had), twice,
    for threads started meanwhile. Returns the threads moved."""
    group = _STEPPED_BACK.pop("group", None)
    if group is not None:
        if set_group_nice(group):
            log.warning("took over: the session's scheduling group back to niceness %d", group)
        else:
            log.error("took over, but the session's scheduling group stays niced: it could not be set back to %d",
                      group)
    by, base = _STEPPED_BACK["by"], _STEPPED_BACK["base"]
    if by <= 0:
        return 0
    moved = set()
    for _ in range(2):
        for pid in process_tree(os.getpid()):
            for tid in threads(pid):
                try:
                    now = os.getpriority(os.PRIO_PROCESS, tid)
                    if now > base and (pid, tid) not in moved:
                        os.setpriority(os.PRIO_PROCESS, tid, max(base, now - by))
                        moved.add((pid, tid))
                except OSError:  # a thread that ended meanwhile
                    continue
    _STEPPED_BACK.update(by=0)
    log.warning("took over: %d threads of the standby's processes back to their priority", len(moved))
    return len(moved)


def wait_for_takeover(db, job: str, ttl_s: float, stopping: threading.Event,
                      tick: Callable[[], object] | None = None, tick_s: float = 2.0) -> bool:
    """Block until this standby should become active; False when it is stopped first. `tick`: what
    the standby keeps fresh while it waits, called every `tick_s` (a failure is logged, not fatal)."""
    db.conn.execute("INSERT INTO standbys (job, pid, ready_at) VALUES (?, ?, ?) ON CONFLICT(job) DO UPDATE SET "
                    "pid = excluded.pid, ready_at = excluded.ready_at", (job, os.getpid(), now_ms()))
    log.info("%s: standby ready, waiting for the lease", job)
    told = False
    ticked = time.monotonic()
    while not stopping.is_set():
        if tick is not None and time.monotonic() - ticked >= tick_s:
            ticked = time.monotonic()
            try:
                tick()
            except Exception as exc:  # noqa: BLE001 - a standby keeps waiting without it
                log.warning("%s: the standby's refresh failed (%s)", job, exc)
        if PROMOTED.wait(0.1):
            log.warning("%s: promoted by the supervisor: taking over", job)
            come_forward()
            return True
        standing, age, holder = lease_standing(db, job, ttl_s)
        if standing == STARVED:
            if not told:  # once per stale spell
                log.warning("%s: the lease is %.1f s old but its holder %s still runs (starved, not gone): "
                            "waiting for the supervisor", job, age / 1000, holder)
            told = True
            continue
        if standing in (FREE, LAPSED):
            log.warning("%s: the lease is %s: taking over", job, "free" if age is None else f"{age / 1000:.1f} s old")
            come_forward()
            return True
        told = False
    return False


HELD, FREE, LAPSED, STARVED = "held", "free", "lapsed", "starved"


def lease_standing(db, job: str, ttl_s: float) -> tuple[str, int | None, str | None]:
    """(standing, age in ms, holder) of the job's lease, as a standby reads it: FREE (no holder),
    LAPSED (no beat for `ttl_s` and its holder gone: take over), STARVED (no beat, but its holder
    still runs: wait for the supervisor) or HELD."""
    age = fencing.lease_age_ms(db, job)
    if age is None:
        return FREE, None, None
    if age <= ttl_s * 1000:
        return HELD, age, None
    holder = fencing.holder(db, job)
    return (STARVED if holder_runs(holder) else LAPSED), age, holder


def takeover_due(db, job: str, ttl_s: float) -> bool:
    """Whether a standby should take over now without waiting for its warm-up to end: promoted, or
    the lease free or lapsed (the cancel of a rehearsal: without a supervisor to promote it, a
    rehearsal begun while the active still beat must not hold the takeover back)."""
    return PROMOTED.is_set() or lease_standing(db, job, ttl_s)[0] in (FREE, LAPSED)


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
    from infra.contracts import EXIT_SUPERSEDED

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
