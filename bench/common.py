"""Helpers shared by the limit, peer and all scenarios (not a scenario: bench/__main__ skips it).

Why here: the ceilings (limit) and the peer comparison must fill topics, pace producers and turn
sink commits into latencies the same way, or their figures could not be compared. Every Kafka
client is built by `infra.kafka_client` from the settings, so a secured cluster works here too.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
from kafka.admin import NewTopic

from infra import broker, cluster, kafka_client
from infra.config import ROOT, Settings
from pipelines.engine.session import get_spark

DECISION = ('{"txn_id": "%s-%d", "card_id": "card-%d", "merchant_id": "m-%d", "amount_cents": %d, '
            '"event_time": %d, "produced_at": %d, "decided_at": %d, "score_avg_ticket": 0.1, '
            '"score_proximity": 0.2, "score_velocity": 0.3, "score": %s, "is_fraud": %s, "is_late": false}')
LOG_APPEND_TIME = 1  # a Kafka record's timestamp type: stamped by the broker
TRANSACTION = ('{"txn_id": "%s-%d", "card_id": "card-%d", "merchant_id": "m-%d", "amount_cents": %d, '
               '"currency": "EUR", "lat": 48.85, "lon": 2.35, "event_time": %d, "produced_at": %d}')


def logger(name: str):
    def log(msg: str) -> None:
        print(f"bench {name}: {msg}", file=sys.stderr, flush=True)
    return log


@contextlib.contextmanager
def busy_cores(n: int, log=None):
    """`n` processes that each keep a core busy (a Python loop at the bench's own priority) while
    the block runs: the shared demo host of the standards ("failover, latency and tests must hold
    with a core kept busy by something else"). Their CPU seconds are returned in the yielded dict
    (`cpu_s`) when the block ends, so a run can show the load was there."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(max(0, n))]
    out: dict = {"cores": len(procs), "cpu_s": None}
    if procs and log:
        log(f"{len(procs)} core(s) kept busy by a loop (pids {', '.join(str(p.pid) for p in procs)})")
    try:
        yield out
    finally:
        if procs:
            out["cpu_s"] = round(sum(cpu_seconds(p.pid) or 0.0 for p in procs), 1)
        for p in procs:
            p.kill()
            p.wait()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a live process has used so far, from /proc; None off Linux or
    once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def record(kind: str, prefix: str, i: int, now: int) -> bytes:
    """One decision (every 50th is fraud) or transaction payload, cheap to format."""
    if kind == "transactions":
        return (TRANSACTION % (prefix, i, i % 1000, i % 97, 1000 + i % 5000, now, now)).encode()
    fraud = i % 50 == 0
    return (DECISION % (prefix, i, i % 1000, i % 97, 1000 + i % 5000, now, now, now,
                        "0.9" if fraud else "0.1", "true" if fraud else "false")).encode()


def fraud_in(n: int) -> int:
    """How many of record(…, i) for i in range(n) are fraud: the truth the peers must reach."""
    return (n + 49) // 50


def _fill(job) -> int:
    s, topic, kind, start, count = job
    prod = kafka_client.producer(s, acks=1, linger_ms=50, batch_size=1 << 20, max_request_size=8 << 20)
    now = int(time.time() * 1000)
    for i in range(start, start + count):
        prod.send(topic, key=b"tx-%d" % i, value=record(kind, "tx", i, now))
    prod.flush()
    prod.close()
    return count


def fill(s: Settings, topic: str, n: int, processes: int, kind: str = "decisions") -> tuple[int, float]:
    """Fill `topic` with n records from `processes` kafka-python producers; (sent, seconds)."""
    per = n // processes
    jobs = [(s, topic, kind, k * per, per if k < processes - 1 else n - per * (processes - 1))
            for k in range(processes)]
    t0 = time.monotonic()
    with mp.get_context("spawn").Pool(processes) as pool:
        sent = sum(pool.map(_fill, jobs))
    return sent, time.monotonic() - t0


def scratch(s: Settings, name: str) -> tuple[str, Path, dict[str, str], dict[str, str]]:
    """A bench's own fraud-job world: (tag, work folder under the run dir, fresh topic names as the
    job's TOPIC_* variables, the job's environment with its store and checkpoints in that folder)."""
    tag = uuid.uuid4().hex[:8]
    s.run_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"bench-{name}-", dir=s.run_dir))
    topics = {var: f"bench-{name}-{kind}-{tag}" for var, kind in
              (("TOPIC_TRANSACTIONS", "tx"), ("TOPIC_DECISIONS", "decisions"), ("TOPIC_DLQ", "dlq"),
               ("TOPIC_MARKERS", "markers"), ("TOPIC_DECISIONS_RT", "rt"))}
    env = {**os.environ, **topics, "PYTHONPATH": str(ROOT), "CARDSTREAM_DB": str(work / "cardstream.db"),
           "CHECKPOINT_ROOT": str(work / "checkpoints")}
    return tag, work, topics, env


def create_topic(s: Settings, topic: str, partitions: int, append_time: bool = False) -> None:
    """A fresh topic; `append_time` stamps records with the broker's append time (LogAppendTime)."""
    configs = {"message.timestamp.type": "LogAppendTime"} if append_time else {}
    admin = kafka_client.admin(s)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs)])
    finally:
        admin.close()


def delete_topics(s: Settings, containing: str, log=None) -> None:
    """Delete every topic whose name contains `containing` (ours and the peer's changelogs)."""
    try:
        admin = kafka_client.admin(s)
        try:
            doomed = [t for t in admin.list_topics() if containing in t]
            if doomed:
                admin.delete_topics(doomed)
        finally:
            admin.close()
    except Exception as exc:  # noqa: BLE001 - the figures matter more than the clean-up
        if log:
            log(f"could not delete the bench topics ({exc})")


def read_stamps(s: Settings, topic: str, expect: int, timeout: float = 60.0) -> list[tuple[int, int, int]]:
    """(partition, offset, Kafka timestamp) of every record in `topic` (values are not decoded)."""
    consumer = kafka_client.consumer(s, topic, auto_offset_reset="earliest", max_poll_records=50_000,
                                     fetch_max_bytes=64 << 20, max_partition_fetch_bytes=16 << 20)
    out: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expect and time.monotonic() < deadline:
            for recs in consumer.poll(500).values():
                out.extend((r.partition, r.offset, r.timestamp) for r in recs)
    finally:
        consumer.close()
    return out


def append_stamped(s: Settings, topic: str, refuse, idle_ms: int, **consumer_kw):
    """Each record of `topic` from the earliest, until `idle_ms` pass without one, each checked to
    be stamped by the broker (LogAppendTime: a latency taken from it uses one clock, the broker's);
    `refuse(topic)` is the exception raised at one that is not. A generator: the consumer closes
    when the caller's loop ends, by a break too."""
    consumer = kafka_client.consumer(s, topic, auto_offset_reset="earliest", consumer_timeout_ms=idle_ms,
                                     **consumer_kw)
    try:
        for m in consumer:
            if m.timestamp_type != LOG_APPEND_TIME:
                raise refuse(topic)
            yield m
    finally:
        consumer.close()


def _paced(job) -> int:
    s, topic, prefix, rate, seconds = job
    prod = kafka_client.producer(s, acks=1, linger_ms=2)
    started_ms = int(time.time() * 1000)
    t0 = time.monotonic()
    total = int(rate * seconds)
    i = 0
    while i < total:
        due = min(total, int((time.monotonic() - t0) * rate) + 1)
        now = int(time.time() * 1000)
        while i < due:
            prod.send(topic, key=b"%s-%d" % (prefix.encode(), i), value=record("decisions", prefix, i, now))
            i += 1
        time.sleep(0.005)
    prod.flush()
    prod.close()
    return started_ms


@contextlib.contextmanager
def paced_producer(s: Settings, topic: str, prefix: str, rate: float, seconds: float):
    """Produce `rate` decisions/s for `seconds` in a child process (not competing for our GIL);
    the async result's value is the wall-clock ms the first record was sent at."""
    ctx = mp.get_context("spawn")
    pool = ctx.Pool(1)
    try:
        yield pool.apply_async(_paced, ((s, topic, prefix, rate, seconds),))
    finally:
        pool.terminate()
        pool.join()


def commit_latencies(stamps: list[tuple[int, int, int]], commits: list[tuple[int, dict[int, int]]],
                     since_ms: int = 0) -> list[int]:
    """Per record: ms from its Kafka timestamp to the first sink commit whose end offset covers it.

    `commits` are (commit wall-clock ms, {partition: end offset, exclusive}); records stamped
    before `since_ms` (warm-up) are left out. Records no commit covers are left out too.
    """
    commits = sorted(commits)
    out = []
    by_part: dict[int, list[tuple[int, int]]] = {}
    for ms, ends in commits:
        for p, end in ends.items():
            by_part.setdefault(int(p), []).append((end, ms))
    for p, lst in by_part.items():  # a commit's end offset per partition only grows; keep it monotone
        best, fixed = -1, []
        for end, ms in lst:
            if end > best:
                fixed.append((end, ms))
                best = end
        by_part[p] = fixed
    ends_of = {p: np.array([e for e, _ in lst]) for p, lst in by_part.items()}
    ms_of = {p: np.array([m for _, m in lst]) for p, lst in by_part.items()}
    for part, off, ts in stamps:
        if ts < since_ms or part not in ends_of:
            continue
        k = int(np.searchsorted(ends_of[part], off, side="right"))
        if k < len(ends_of[part]):
            out.append(int(ms_of[part][k]) - ts)
    return out


def wait_job(job: subprocess.Popen, bench: str, log_path: Path, timeout: float) -> int:
    """A job process's exit code within `timeout` seconds; past it the job is killed and the bench
    ends in one sentence naming its log."""
    try:
        return job.wait(timeout)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()
        raise SystemExit(f"bench {bench}: the fraud job did not finish within {timeout:g} s; see {log_path}.") from None


def pct(values, q: float) -> float | None:
    """Nearest-rank percentile (None for no values)."""
    if len(values) == 0:
        return None
    v = np.sort(np.asarray(values))
    rank = max(1, min(len(v), int(np.ceil(q / 100 * len(v)))))
    return float(v[rank - 1])


@contextlib.contextmanager
def own_broker(s, log):
    """Start the broker unless one of ours (or KAFKA_BOOTSTRAP) is there; stop it only if we started it."""
    started = not s.external_bootstrap and not broker.broker_pids(s)
    bootstrap = broker.up(s, quiet=True)
    if started:
        log(f"started a broker on {bootstrap}")
    try:
        yield bootstrap
    finally:
        if started:
            broker.down(s, quiet=True)
            log("stopped the broker")


@contextlib.contextmanager
def fraud_job(env: dict, work: Path, *args: str):
    """`python -m pipelines.fraud ARGS` in its own process group, its output appended to
    WORK/fraud.log; at the end SIGTERM to the group (the job's JVM too), SIGKILL after 60 s."""
    with open(work / "fraud.log", "ab") as out:
        job = subprocess.Popen([sys.executable, "-m", "pipelines.fraud", *args], env=env, cwd=ROOT,
                               stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield job
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)


@contextlib.contextmanager
def own_spark(app_name: str, s: Settings, **conf):
    """This process's SparkSession (pipelines.engine.session.get_spark), stopped at the end only if
    this bench started it: a bench run inside a process whose session is shared (the tests') leaves
    that session running, with the settings `conf` changed on it put back (the usage job's state
    store must not become the fraud job's)."""
    # deferred: pyspark (and its JVM) loads only where Spark runs
    from pyspark.sql import SparkSession

    shared = SparkSession.getActiveSession()
    before = {k: shared.conf.get(k, None) for k in conf} if shared is not None else {}
    spark = get_spark(app_name, s, **conf)
    try:
        yield spark
    finally:
        if shared is None:
            spark.stop()
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def unload_state(spark) -> None:
    """Drop stopped queries' state from the JVM before the next query runs. Spark unloads a
    stopped query's state stores at its next maintenance (every 60 s); queries run back to back in
    one bench would otherwise carry their predecessors' (an in-memory store's million keys a run)
    in the same heap, and every later query's figures would include that garbage collection."""
    state = getattr(spark._jvm.org.apache.spark.sql.execution.streaming.state, "StateStore$")
    state.__getattr__("MODULE$").unloadAll()


@contextlib.contextmanager
def own_cluster(s, log):
    """Start the Spark standalone cluster (infra.cluster) unless ours runs; stop it only if we started it."""
    started = not cluster.master_pids(s)
    t0 = time.monotonic()
    cluster.up(s, quiet=True, kafka=False)
    if started:
        log(f"started a Spark master and {s.spark_workers} workers on {s.spark_master_url} "
            f"in {time.monotonic() - t0:.1f} s")
    try:
        yield s.spark_master_url
    finally:
        if started:
            cluster.down(s, quiet=True, kafka=False)
            log("stopped the Spark cluster")


def wait_for_rows(query, n: int, timeout: float, what: str, every: float = 0.1) -> list[dict]:
    """Poll a streaming query until its batches have read `n` rows (or `timeout` s); its progress.

    A query that stops meanwhile is an error named after `what`.
    """
    t0 = time.monotonic()
    progress: list[dict] = []
    while time.monotonic() - t0 < timeout:
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        if sum(p["numInputRows"] for p in progress) >= n:
            break
        if not query.isActive:
            raise RuntimeError(f"{what} stopped: {query.exception()}")
        time.sleep(every)
    return progress
