"""PySpark's Python worker daemon whose workers run at a lower CPU priority (`spark.python.daemon.module`).

In real-time mode the fraud job runs two paths on the same cores: the real-time tasks, all in the
JVM, and the stateful path, whose state processor runs in Python workers. Its bursts (a
micro-batch every few seconds) were what pushed the real-time p99 up (bench latency, README).
Niced, the workers yield the CPU to the real-time tasks and take whatever is left.

Only the workers, and only once they have imported pandas and Arrow: the daemon and a worker's
start-up keep the normal priority, because Spark waits a bounded time for a new worker to connect
back, and a worker niced from its first instruction on a loaded machine (the whole demo starting)
missed it ("Python worker failed to connect back").
"""
import os

from pyspark import daemon

from infra.config import load

_run_worker = daemon.worker
_nice = 0
_niced = False


def _niced_worker(sock, authenticated):
    global _niced
    if not _niced:
        import pandas  # noqa: F401  (the heavy imports, at the normal priority)
        import pyarrow  # noqa: F401
        os.nice(_nice)
        _niced = True
    return _run_worker(sock, authenticated)


if __name__ == "__main__":
    _nice = load().realtime_worker_nice
    daemon.worker = _niced_worker
    daemon.manager()
