"""The Spark standalone cluster with HDFS: a real master, two workers and a NameNode with a DataNode,
all on loopback, started once for this module (`make cluster-up`'s `infra.cluster.up`).

Both jobs run on it as a cluster user would run them (spark://, jars and Python packages shipped
with the application), the fraud job's decisions feeding the usage job, with every checkpoint and
state store on hdfs://. Through one run: a worker is SIGKILLed (its executors die with it, the
jobs go on with the other worker's, the worker comes back) while the broker stops and starts
again; then the fraud driver is SIGKILLed and restarted (crash) while the usage driver is frozen,
replaced and woken (zombie: it must stop, fenced). The audit, reading the checkpoints on HDFS
over WebHDFS, is exact: the fraud job decided each transaction once, exactly-once equals the
truth, at-least-once lost nothing, at-most-once duplicated nothing. A model version saved on
HDFS is loaded, scored and served from there, and the Python reader is checked on the real
NameNode. One Kafka broker (the session's) is enough here.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pandas as pd
import pytest

from controlplane.store import connect
from infra import broker, cluster, daemons, hdfs, kafka_client, storage
from infra.config import ROOT, load
from infra.topics import ensure_topics
from pipelines import audit
from pipelines.engine import checkpoints
from bench.harness.jobs import JobProcess, counts, job_env, wait_for

pytestmark = pytest.mark.timeout(300)

# four task slots per worker: both jobs and, during the zombie fault, their replacements (each
# application takes one core on every worker)
CLUSTER_ENV = {"SPARK_WORKERS": "2", "SPARK_WORKER_CORES": "4", "SPARK_WORKER_MEMORY": "2g", "HDFS": "1"}


@pytest.fixture(scope="module")
def spark_cluster(kafka):
    """HDFS (HDFS_PORT), the master and two workers on the settings' ports (SPARK_MASTER_PORT,
    SPARK_MASTER_UI_PORT), under the test run's folder; stopped at the end, executors included."""
    s = load({**os.environ, **CLUSTER_ENV})
    env = {**os.environ, **CLUSTER_ENV, "SPARK_MASTER": s.spark_master_url}
    t0 = time.monotonic()
    cluster.up(s, quiet=True, kafka=False)
    print(f"cluster and HDFS up in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    try:
        yield s, env
    finally:
        cluster.down(s, quiet=True, kafka=False)
        assert not cluster.master_pids(s) and not cluster.worker_pids(s) and not cluster.executor_pids(s)
        assert not any(hdfs.pids(s).values())


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


def hdfs_root(s, name: str):
    """A fresh folder of this test's own on the cluster's HDFS, as the settings' Location."""
    return s.checkpoint_root.with_name(f"test-{name}-{uuid.uuid4().hex[:8]}")


def test_the_python_reader_on_the_real_hdfs(spark_cluster):
    """infra.storage over WebHDFS on the NameNode: a file written whole and replaced, a folder
    listed, sizes summed, absence read as absence; and a fresh instance's INSTANCE file."""
    s, _ = spark_cluster
    root = hdfs_root(s, "reader")
    assert storage.is_remote(root) and str(root).startswith(f"hdfs://127.0.0.1:{s.hdfs_port}/")
    storage.make_dirs(root / "offsets")
    storage.write_text(root / "metadata", '{"id":"q-1"}')
    storage.write_text(root / "offsets" / "0", 'v1\n{"batchTimestampMs":5}\n{"t":{"0":7}}')
    storage.write_text(root / "metadata", '{"id":"q-2"}')  # replaced whole
    assert storage.read_text(root / "metadata") == '{"id":"q-2"}'
    assert sorted((e.name, e.is_dir) for e in storage.entries(root)) == [("metadata", False), ("offsets", True)]
    assert storage.total_bytes(root) == len('{"id":"q-2"}') + len('v1\n{"batchTimestampMs":5}\n{"t":{"0":7}}')
    assert storage.read_text(root / "nothing") is None and storage.entries(root / "nothing") == []
    assert checkpoints.batch_end(root, 0) == {"t": {0: 7}} and checkpoints.query_id(root) == "q-2"

    link = root / "usage-at-most-once"
    old = checkpoints.fresh_instance(link, 3, current=True)
    new = checkpoints.fresh_instance(link, 4, current=True)
    assert checkpoints.resolve(link) == new and storage.stat(old) is None
    assert [e.name for e in storage.entries(link)] == [checkpoints.POINTER]
    checkpoints.clear(link)
    storage.remove(root)
    assert storage.stat(root) is None

    away = storage.Location(str(root), web=f"http://127.0.0.1:{daemons.free_ports(1)[0]}")
    with pytest.raises(storage.StorageError, match="HDFS does not answer"):
        storage.read_text(away / "metadata")


FRAUD_READY = re.compile(r"\bfraud INFO microbatch mode, epoch\b")


def txn(i: int) -> dict:
    """One valid transaction, keyed by its card; one in 60 far above the card's usual amount."""
    now = int(time.time() * 1000)
    return {"txn_id": f"c-{i}", "card_id": f"card-{i % 40}", "merchant_id": f"m-{i % 7}",
            "amount_cents": 90_000 if i % 60 == 59 else 2_000 + i % 300, "currency": "EUR",
            "lat": 48.85, "lon": 2.35, "event_time": now, "produced_at": now}


class Transactions(threading.Thread):
    """Sends transactions at `rate` a second until stopped, through broker outages (a send that
    fails is sent again: the truth is what the topic holds)."""

    def __init__(self, s, topic: str, rate: float):
        super().__init__(daemon=True)
        self.s, self.topic, self.rate = s, topic, rate
        self.sent: set[str] = set()
        self.halt = threading.Event()

    def run(self):
        prod = kafka_client.producer(self.s, acks="all", linger_ms=5, retries=1_000_000)
        i = 0
        while not self.halt.is_set():
            batch = [txn(i + k) for k in range(10)]
            for r in batch:
                prod.send(self.topic, key=r["card_id"].encode(), value=json.dumps(r).encode())
            prod.flush()
            self.sent.update(r["txn_id"] for r in batch)
            i += 10
            self.halt.wait(10 / self.rate)
        prod.close()

    def stop(self):
        self.halt.set()
        self.join(120)


def tree(pid: int) -> list[int]:
    """`pid` and every process below it (a job's driver and its Spark JVM)."""
    children: dict[int, list[int]] = {}
    for proc in os.listdir("/proc"):
        if proc.isdigit():
            try:
                ppid = int(open(f"/proc/{proc}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(proc))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def signal_tree(pids: list[int], sig) -> None:
    for p in pids:
        daemons.send_signal(p, sig)


def progress(db) -> tuple[int, int]:
    """(the fraud job's decisions in the store, the at-least-once usage count)."""
    decided = db.execute("SELECT count(*) FROM decisions").fetchone()[0]
    return decided, counts(db)["at-least-once"]["processed"]


def grows(db, what: str, timeout: float = 120, by: int = 30) -> None:
    """Wait until both jobs have moved on by `by` records."""
    d0, u0 = progress(db)
    wait_for(lambda: (lambda d, u: d >= d0 + by and u >= u0 + by)(*progress(db)), timeout,
             f"both jobs to move on {what}")


def start_all(jobs) -> None:
    """Start the jobs side by side (each start is a JVM's and a session's: seconds of CPU)."""
    errors: list[BaseException] = []

    def start(job):
        try:
            job.start(timeout=240)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(job,)) for job in jobs]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]


@pytest.mark.timeout(900)
def test_both_jobs_on_hdfs_through_worker_down_crash_zombie_and_broker_down(spark_cluster, settings, tmp_path):
    """Faults that can come together come together, so the run is a few minutes: a worker and the
    broker go down at once; then the fraud driver is SIGKILLed (crash) while the usage driver is
    frozen (zombie: its at-most-once query's fresh instance on HDFS, and fencing), and both
    replacements start on the checkpoints on HDFS."""
    s, env = spark_cluster
    t_start = time.monotonic()
    laps: list[tuple[str, float]] = []

    def lap(what: str) -> None:
        laps.append((what, time.monotonic() - t_start))
        print(f"  {laps[-1][1]:6.1f} s  {what}", file=sys.stderr)

    tag = uuid.uuid4().hex[:8]
    topics = {name: f"{name.lower().replace('_', '-')}-{tag}" for name in
              ("TOPIC_TRANSACTIONS", "TOPIC_DECISIONS", "TOPIC_DLQ", "TOPIC_MARKERS", "TOPIC_DECISIONS_RT",
               "TOPIC_LABELS", "TOPIC_FEATURES")}
    root = hdfs_root(s, "jobs")
    job_vars = {**topics, "CHECKPOINT_ROOT": str(root),
                "KAFKA_DELIVERY_TIMEOUT_MS": "60000"}
    run_env = job_env(tmp_path, topics["TOPIC_DECISIONS"], {**env, **job_vars})
    s_job = load(run_env)
    assert s_job.checkpoint_root == root and s_job.checkpoint_root.web == root.web
    ensure_topics(list(topics.values()), partitions=2, s=s_job)
    db = connect(tmp_path / "cardstream.db")

    def fraud_job() -> JobProcess:
        return JobProcess(run_env, args=[], module="pipelines.fraud", ready=FRAUD_READY)

    fraud, usage = fraud_job(), JobProcess(run_env)
    gone: list[JobProcess] = []
    sender = Transactions(s_job, topics["TOPIC_TRANSACTIONS"], rate=40)
    try:
        start_all([fraud, usage])
        lap("both jobs running on the cluster")
        apps = {a["name"]: a["id"] for a in cluster.master_json(s)["activeapps"]}
        assert set(apps) == {"cardstream-fraud", "cardstream-usage"}, apps
        wait_for(lambda: all(app_executors(s, a) == {0: 1, 1: 1} for a in apps.values()), 60,
                 "one executor of each job on each worker")
        sender.start()
        grows(db, "at the start", timeout=180)
        lap("decisions flowing through both jobs")

        # worker-down and broker-down: a worker SIGKILLed (its executors with it) and the broker
        # stopped, both for 6 s; the jobs go on with the other worker once the broker is back
        pid, executors = cluster.kill_worker(s, 0)
        assert executors, "worker 0 ran no executor"
        broker.down(settings, quiet=True)
        wait_for(lambda: not any(daemons.alive(p) for p in executors), 15, "the killed worker's executors to exit")
        time.sleep(6)
        broker.up(settings, quiet=True)
        cluster.start_worker(s, 0)
        cluster.wait_alive(s, [0], timeout=90)
        grows(db, "after worker-down and broker-down", timeout=180)
        lap("worker-down + broker-down: both jobs went on")

        # crash (fraud: SIGKILL) and zombie (usage: frozen while a replacement takes its lease)
        frozen = tree(usage.proc.pid)
        signal_tree(frozen, signal.SIGSTOP)
        fraud.kill()
        zombie, usage = usage, JobProcess(run_env)
        gone.append(zombie)
        fraud = fraud_job()
        start_all([fraud, usage])
        grows(db, "after the crash and on the usage replacement")
        signal_tree(frozen, signal.SIGCONT)
        code = zombie.wait_exit(120)
        assert code in (3, 4), f"the usage zombie exited {code}:\n" + "\n".join(zombie.lines[-30:])
        lap("crash + zombie: fraud restarted, the woken usage zombie stopped, fenced")
    finally:
        sender.stop()
    try:
        def caught_up():
            snap = audit.snapshot(s_job, db)
            done = snap["fraud"]["lag_records"] == 0 and all(u["lag_records"] == 0 for u in snap["usage"].values())
            return snap if done and snap["fraud"]["truth"] == len(sender.sent) else None

        snap = wait_for(caught_up, 180, "both jobs to catch up with every transaction", interval=2)
        lap("caught up; audited")
    finally:
        for job in [fraud, usage, *gone]:
            job.stop()
        db.conn.close()
    fraud, usage = snap["fraud"], snap["usage"]
    assert fraud["truth"] == fraud["observed"] == fraud["topic"] == len(sender.sent), fraud
    assert fraud["lost"] == fraud["topic_lost"] == fraud["duplicated"] == 0, fraud
    assert usage["exactly-once"]["truth"] == len(sender.sent), usage["exactly-once"]
    assert usage["exactly-once"]["lost"] == usage["exactly-once"]["duplicated"] == 0, usage["exactly-once"]
    assert usage["at-least-once"]["lost"] == 0, usage["at-least-once"]
    assert usage["at-most-once"]["duplicated"] == 0, usage["at-most-once"]
    # the checkpoints are where the settings say: on HDFS, none under the run folder
    assert checkpoints.query_id(root / "fraud" / "decisions") and checkpoints.query_id(root / "usage-exactly-once")
    assert not (tmp_path / "checkpoints").exists()
    print("timings: " + ", ".join(f"{what} {t:.0f} s" for what, t in laps), file=sys.stderr)


def test_a_model_version_saved_on_hdfs_is_loaded_served_and_scored_from_there(spark_cluster, spark, tmp_path):
    """With the checkpoints on HDFS the model versions are too (models.models_dir): MLlib's files
    and model.json written there, the version loaded back from there, its model.json read by the
    JVM (ModelScore.text, as the executors read it) to score the stateful path, and named by the
    real-time path's serving file."""
    from pipelines.fraud import models, realtime, train
    from tests.spark.test_model_export import estimators

    s, _ = spark_cluster
    s_hdfs = dataclasses.replace(s, checkpoint_root=hdfs_root(s, "models") / "checkpoints")
    folder = models.models_dir(tmp_path, s_hdfs)
    assert storage.is_remote(folder) and folder.name == "models"
    features = models.MODEL_FEATURES
    rng = np.random.default_rng(5)
    frame = pd.DataFrame({name: rng.random(600) for name in features})
    frame["amount"] = rng.gamma(2.0, 40.0, 600)
    frame["label"] = ((frame["t_risk_7d"] > 0.7) & (frame["amount"] > 80)).astype(int)
    fitted = train.fit(spark, estimators()["gradient-boosted-trees"].setMaxIter(5), frame, features)
    db = connect(tmp_path / "store.db")
    row = {"explain": json.dumps(models.tree_explain(features)), "kind": "gradient-boosted-trees", "params": "{}",
           "features": json.dumps(list(features)), "train_from": "2018-07-25", "train_to": "2018-07-31",
           "as_of": "2018-08-08T00:00:00", "threshold": 0.5, "validation": "{}", "candidates": "[]",
           "train_rows": 600, "train_frauds": int(frame["label"].sum()), "fit_s": 0.0, "created_at": 0}
    version, path = models.save_version(db, folder, row, fitted, features, models.tree_explain(features))
    assert str(path).startswith("hdfs://") and storage.stat(path / models.MODEL_JSON).size > 0

    loaded = models.load(db)
    assert loaded.version == version and loaded.path == str(path), loaded.why
    assert models.jvm_verdict(loaded) == f"{path}/{models.MODEL_JSON}"
    test = frame.head(50).assign(amount_cents=lambda f: (f["amount"] * 100).round().astype("int64"))
    rows = test.drop(columns=["amount", "label"]).assign(row=range(len(test)))
    out = models.scored_columns(spark.createDataFrame(rows), loaded).toPandas().sort_values("row")
    assert np.allclose(out["score"].to_numpy(), train.score(spark, fitted, test, features), atol=1e-9)
    assert out["explanation"].notna().all()  # the JVM's path attribution, from model.json on HDFS
    served, why, text = realtime.serving_lines(version, 0.5, str(path), tmp_path)
    assert served == version and why is None and f"model\t{path}/{models.MODEL_JSON}\n" in text
    db.conn.close()
    storage.remove(s_hdfs.checkpoint_root.parent)
