"""PySpark's Python worker daemon, started at a lower CPU priority (`spark.python.daemon.module`).

In real-time mode the fraud job runs two paths on the same cores: the real-time tasks, all in the
JVM, and the stateful path, whose state processor runs in Python workers. Its bursts (a
micro-batch every few seconds) were what pushed the real-time p99 up (bench latency, README).
Niced, the workers (forked from this daemon, so niced too) yield the CPU to the real-time tasks
and take whatever is left, which on two cores is plenty for the companion's throttled batches.
"""
import os

from pyspark import daemon

from infra.config import load

if __name__ == "__main__":
    os.nice(load().realtime_worker_nice)
    daemon.manager()
