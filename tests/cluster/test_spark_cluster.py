"""The Spark standalone cluster: a real master and two workers (1 core, 1 GB each) on loopback.

The usage job runs on it as a cluster user would run it (spark://, jars and Python packages
shipped with the application); a worker is SIGKILLed mid-run, its executors die with it, the
job goes on with the other worker's, the worker comes back and gets an executor again; and the
three guarantees keep their word: exactly-once equals the truth, at-least-once lost nothing,
at-most-once duplicated nothing. One Kafka broker (the session's) is enough here.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import uuid

import pytest

from controlplane.store import connect
from infra import cluster, daemons
from infra.config import ROOT, load
from infra.topics import ensure_topics
from pipelines import audit
from bench.harness.jobs import JobProcess, Producer, Truth, counts, job_env, settled, wait_for

pytestmark = pytest.mark.timeout(300)

CLUSTER_ENV = {"SPARK_WORKERS": "2", "SPARK_WORKER_CORES": "1", "SPARK_WORKER_MEMORY": "1g"}


@pytest.fixture(scope="module")
def spark_cluster(kafka):
    """The master and two workers on the settings' ports (SPARK_MASTER_PORT, SPARK_MASTER_UI_PORT),
    under the test run's folder; stopped at the end, executors included."""
    s = load({**os.environ, **CLUSTER_ENV})
    env = {**os.environ, **CLUSTER_ENV, "SPARK_MASTER": s.spark_master_url}
    t0 = time.monotonic()
    cluster.up(s, quiet=True, kafka=False)
    print(f"cluster up in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    try:
        yield s, env
    finally:
        cluster.down(s, quiet=True, kafka=False)
        assert not cluster.master_pids(s) and not cluster.worker_pids(s) and not cluster.executor_pids(s)


def app_executors(s, app_id: str) -> dict[int, int]:
    """{worker index: executors of `app_id` on it now}."""
    out = {}
    for i in range(s.spark_workers):
        doc = cluster.worker_json(s, i) or {}
        out[i] = cluster.executor_apps(doc).count(app_id)
    return out


def test_python_code_runs_on_the_workers_executors(spark_cluster):
    """A Python function that imports the project runs in executors under both workers' folders:
    the packages came in the application's zip (the workers have no PYTHONPATH to the tree)."""
    s, env = spark_cluster
    script = (
        "import os, sys\n"
        "from pipelines.engine.session import get_spark\n"
        "spark = get_spark('cardstream-cluster-probe')\n"
        "def where(_):\n"
        "    import pipelines.guarantees as g\n"
        "    yield os.getcwd() + ' ' + g.__file__\n"
        "for line in sorted(set(spark.sparkContext.parallelize(range(8), 8).mapPartitions(where).collect())):\n"
        "    print('RAN', line)\n"
        "spark.stop()\n")
    out = subprocess.run([sys.executable, "-c", script], env={**env, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT),
                         capture_output=True, text=True, timeout=150)
    ran = [line.split()[1:] for line in out.stdout.splitlines() if line.startswith("RAN ")]
    assert ran, out.stdout[-2000:] + out.stderr[-2000:]
    folders = {cwd.split("/app-")[0] for cwd, _ in ran}
    assert folders == {str(cluster.worker_dir(s, i)) for i in range(2)}, ran
    assert all(".zip/pipelines/guarantees.py" in module for _, module in ran), ran


def test_usage_job_keeps_its_guarantees_when_a_worker_is_killed(spark_cluster, tmp_path):
    s, env = spark_cluster
    topic = f"decisions-{uuid.uuid4().hex[:8]}"
    ensure_topics([topic], partitions=2, s=load())
    job = JobProcess(job_env(tmp_path, topic, env))
    db = connect(tmp_path / "cardstream.db")
    truth = Truth()
    producer = Producer(None, topic, truth, rate=100, duplicate_rate=0.1)
    try:
        job.start(timeout=180)
        app = cluster.master_json(s)["activeapps"]
        assert [a["name"] for a in app] == ["cardstream-usage"], app
        app_id = app[0]["id"]
        wait_for(lambda: app_executors(s, app_id) == {0: 1, 1: 1}, 30, "one executor on each worker")
        producer.start()
        wait_for(lambda: counts(db)["exactly-once"]["processed"] > 200, 90, "the first events on the cluster")

        pid, executors = cluster.kill_worker(s, 0)
        assert executors, "worker 0 ran no executor"
        wait_for(lambda: not any(daemons.alive(p) for p in executors), 10,
                 "the killed worker's executors to exit with it")
        wait_for(lambda: cluster.worker_states(cluster.master_json(s), s)[0].state == "DEAD", 30,
                 "the master to see worker 0 dead")
        before = counts(db)["exactly-once"]["processed"]
        wait_for(lambda: counts(db)["exactly-once"]["processed"] > before + 100, 60,
                 "batches on the remaining worker")

        cluster.start_worker(s, 0)
        cluster.wait_alive(s, [0], timeout=90)
        wait_for(lambda: app_executors(s, app_id)[0] == 1, 60, "a new executor on the restarted worker")
        before = counts(db)["exactly-once"]["processed"]
        wait_for(lambda: counts(db)["exactly-once"]["processed"] > before + 100, 60, "batches after the restart")
    finally:
        producer.stop()
    sent = producer.sent_records
    distinct, fraud = truth.counts()
    got = settled(db, distinct)
    job.stop()
    assert got["exactly-once"] == {"processed": distinct, "fraud": fraud}
    assert got["at-least-once"]["processed"] >= sent       # nothing lost, duplicates counted
    assert got["at-most-once"]["processed"] <= sent        # nothing counted twice
    s_job = dataclasses.replace(load(), topics=dataclasses.replace(load().topics, decisions=topic),
                                store_path=tmp_path / "cardstream.db", checkpoint_root=tmp_path / "checkpoints")
    usage = audit.snapshot(s_job, db)["usage"]
    assert usage["exactly-once"]["truth"] == distinct
    assert usage["exactly-once"]["lost"] == usage["exactly-once"]["duplicated"] == 0
    assert usage["at-least-once"]["lost"] == 0
    db.conn.close()
