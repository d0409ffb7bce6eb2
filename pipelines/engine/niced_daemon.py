"""PySpark's Python worker daemon whose workers run at a lower CPU priority (`spark.python.daemon.module`).

In real-time mode the fraud job runs two paths on the same cores: the real-time tasks, all in the
JVM, and the stateful path, whose state processor runs in Python workers. Its bursts (a
micro-batch every few seconds) were what pushed the real-time p99 up (bench latency, README).
Niced, the workers yield the CPU to the real-time tasks and take whatever is left.

Only the workers, and only once they have imported pandas and Arrow: the daemon and a worker's
start-up keep the normal priority, because Spark waits a bounded time for a new worker to connect
back, and a worker niced from its first instruction on a loaded machine (the whole demo starting)
missed it ("Python worker failed to connect back").

A worker keeps its niceness relative to the daemon's, set again before each task (`settle`): a
standby's daemon starts niced itself (pipelines/engine/standby.py `step_back`), so its workers'
niceness is clamped at 19, and the takeover's step forward alone brought them back to 9, not 10.
"""
import os

from pyspark import daemon

from infra.config import load

_run_worker = daemon.worker
_nice = 0
_imported = False


def settle(offset: int) -> int:
    """This thread's niceness to its parent's (the daemon's) plus `offset`, at most 19; unchanged
    when that would need a privilege the process lacks. Returns the niceness it has."""
    want = min(19, os.getpriority(os.PRIO_PROCESS, os.getppid()) + offset)
    if os.getpriority(os.PRIO_PROCESS, 0) != want:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, want)
        except OSError:  # lowering it needs CAP_SYS_NICE or RLIMIT_NICE: it stays as it is
            pass
    return os.getpriority(os.PRIO_PROCESS, 0)


def _niced_worker(sock, authenticated):
    global _imported
    if not _imported:
        import pandas  # noqa: F401  (the heavy imports, at the normal priority)
        import pyarrow  # noqa: F401
        _imported = True
    settle(_nice)
    return _run_worker(sock, authenticated)


if __name__ == "__main__":
    _nice = load().realtime_worker_nice
    daemon.worker = _niced_worker
    daemon.manager()
