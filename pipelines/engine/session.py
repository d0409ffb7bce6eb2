"""The one SparkSession factory: local jars, RocksDB state, sized for a small machine, quiet.

On a Spark standalone master (`spark://`, CLUSTER=1) the application carries what its executors
need, as on a real cluster: the connector and our jars (spark.jars: local files the driver serves,
nothing downloaded at job start), the project's Python packages as one zip (spark.submit.pyFiles),
the interpreter to run them with, and executors bounded to fit a worker. Checkpoints stay under
CHECKPOINT_ROOT: the executors write state there, so it must be a place every process can reach:
with CLUSTER=1 the loopback HDFS (infra/hdfs.py; Spark's own Hadoop client reads hdfs:// URIs),
on a real cluster a distributed file system or an object store.
"""
from __future__ import annotations

import hashlib
import os
import re
import sys
import zipfile
from pathlib import Path

from infra import hdfs
from infra.config import ROCKSDB_PROVIDER, ROOT, Settings, load
from pipelines.engine import cds
from infra.jars import is_complete

# the packages executors import (Python UDFs, pandas functions, the Python worker daemon)
PY_PACKAGES = ("pipelines", "infra", "controlplane", "simulator")
LOCAL_FS_CLASS = "cardstream.fs.NioLocalFileSystem"


def connector_jars(s: Settings) -> list[str]:
    if not is_complete(s.spark_jars, "spark"):
        raise SystemExit(f"The Spark-Kafka connector jars in {s.spark_jars} are missing or "
                         f"incomplete; run `make setup`.")
    return sorted(str(p) for p in s.spark_jars.glob("*.jar"))


# A query stopped while its foreachBatch runs a Spark job: Spark tells that interruption apart by
# matching the Py4J error's text (a Java stack trace, kilobytes) against `((.|\r\n|\r|\n)*)`,
# which Java's regex walks with several frames per character: the stream thread died of a
# StackOverflowError at the default 1 MB stack (a thousand lines in the log at every such stop).
THREAD_STACK = "-Xss16m"


def get_spark(app_name: str = "cardstream", s: Settings | None = None, **extra_conf):
    """Return the SparkSession for this process (created once, shared after that).

    PYSPARK_PYTHON is pinned to the running interpreter so Python workers see the virtualenv's
    packages; the connector jars are local files so nothing is downloaded at job start.
    """
    # deferred: pyspark (and its JVM) loads only where Spark runs
    from pyspark.sql import SparkSession

    s = s or load()
    if s.spark_ui and (s.spark_master.startswith("local") or on_loopback_cluster(s)):
        # the UI (and the driver) bind to loopback only: it has no login. Not on a remote cluster,
        # whose executors must reach the driver.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    jars = ",".join(connector_jars(s))
    builder = (
        SparkSession.builder.appName(app_name)
        .master(s.spark_master)
        .config("spark.jars", jars)
        .config("spark.driver.extraClassPath", ":".join(connector_jars(s)))
        .config("spark.sql.shuffle.partitions", str(s.shuffle_partitions))
        .config("spark.default.parallelism", str(s.shuffle_partitions))
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.streaming.minBatchesToRetain", str(s.min_batches_to_retain))
        # CHECKPOINT_ROOT is a local path. Spark's default manager for it (Hadoop's FileContext)
        # forks `readlink` four times per file it renames and `chmod` once per file it creates
        # (Hadoop without its native library): 15 processes per batch in the offset and commit
        # logs and each state partition's changelog, 35 ms a log and 40 ms a partition. Hadoop's
        # FileSystem API renames with one rename(2): the same atomic file on a local disk.
        .config("spark.sql.streaming.checkpointFileManagerClass",
                "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "true" if s.spark_ui else "false")
        # port 4040, or the next free one (jobs, standbys and tests side by side): spark.port.maxRetries
        .config("spark.ui.killEnabled", "false")
        .config("spark.ui.retainedJobs", "200").config("spark.ui.retainedStages", "200")
        .config("spark.sql.ui.retainedExecutions", "100")
        .config("spark.sql.streaming.ui.retainedProgressUpdates", "200")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false")
        # PySpark records the Python call site of every Column function for error messages: four
        # Py4J calls and a stack walk each, thousands as a job plans its queries. Off: a fraud
        # job's start 1.2 s and 1.9 CPU-s shorter (bench/RESULTS.md#jvm-start); errors keep their JVM trace
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        .config("spark.driver.memory", s.spark_driver_memory)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.warehouse.dir", str(s.run_dir / "spark-warehouse"))
        .config("spark.driver.extraJavaOptions",
                f"-Dderby.system.home={s.run_dir} {THREAD_STACK} {cds.java_options(s)}".strip())
    )
    if s.spark_master.startswith("local"):
        # one JVM, whose class path holds our jars: Hadoop's local file system without a `chmod`
        # process per file it creates (infra/localfs). Not on a cluster: an executor may open
        # the file system before the application's jars reach its class loader.
        builder = builder.config("spark.hadoop.fs.file.impl", LOCAL_FS_CLASS)
    else:
        for key, value in cluster_conf(s, python_zip(s.run_dir / "pyfiles")).items():
            builder = builder.config(key, value)
    if hdfs.is_ours(s, str(s.checkpoint_root)):  # one DataNode: blocks kept once
        for key, value in hdfs.client_conf(s).items():
            builder = builder.config(key, value)
    for key, value in extra_conf.items():
        builder = builder.config(key.replace("_", "."), value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(s.spark_log_level)
    return spark


def memory_mb(text: str) -> int:
    """Spark's memory notation ("2g", "512m", "1024k", plain bytes) in MB."""
    m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)b?\s*", text.lower())
    if not m:
        raise SystemExit(f"{text!r} is not a memory size like 2g or 512m.")
    n, unit = int(m.group(1)), m.group(2)
    return {"": n // (1 << 20), "k": n // 1024, "m": n, "g": n << 10, "t": n << 20}[unit]


def on_loopback_cluster(s: Settings) -> bool:
    return bool(re.match(r"spark://(127\.0\.0\.1|localhost)[:/]", s.spark_master))


def cluster_conf(s: Settings, py_zip: Path) -> dict[str, str]:
    """An application's settings on a standalone master. Each executor is one core and that core's
    share of a worker's memory, one per worker (spark.cores.max), so an application never takes a
    whole worker and a worker holds as many applications as it has cores (the jobs, their warm
    standbys)."""
    executor_mb = max(256, memory_mb(s.spark_worker_memory) // max(1, s.spark_worker_cores))
    conf = {"spark.executor.cores": "1",
            "spark.executor.memory": f"{executor_mb}m",
            "spark.cores.max": str(max(1, s.spark_workers)),
            "spark.submit.pyFiles": str(py_zip),
            "spark.pyspark.python": sys.executable}
    if on_loopback_cluster(s):
        conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    if s.spark_executor_jvm_opts:
        conf["spark.executor.extraJavaOptions"] = " ".join(s.spark_executor_jvm_opts)
    return conf


def python_zip(folder: Path, root: Path = ROOT, packages: tuple[str, ...] = PY_PACKAGES) -> Path:
    """The project's Python packages as one zip for executors, named by its content, so processes
    starting side by side share one file and a changed tree gets a new one (written aside, then
    renamed: never half a file)."""
    files = sorted(p for pkg in packages for p in (root / pkg).rglob("*.py") if "__pycache__" not in p.parts)
    digest = hashlib.sha256()
    for p in files:
        digest.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    target = folder / f"cardstream-{digest.hexdigest()[:12]}.zip"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{target.name}.{os.getpid()}"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in files:
            zf.writestr(zipfile.ZipInfo(str(p.relative_to(root)), (1980, 1, 1, 0, 0, 0)), p.read_bytes())
    os.replace(tmp, target)
    return target


def record_ui(db, job: str, spark) -> str | None:
    """Put this process's Spark UI address on its job_status row (`job`: the row the supervisor
    keeps for this process, the job or its standby), with this pid so a page never links a UI of
    a process that has gone. Nothing when the UI is off or the supervisor keeps no such row."""
    url = spark.sparkContext.uiWebUrl
    if url:
        db.conn.execute("UPDATE job_status SET ui_url = ?, ui_pid = ? WHERE job = ?", [url, os.getpid(), job])
    return url


def warm_up(spark, s: Settings | None = None, topic: str | None = None) -> None:
    """Run the kinds of work a job's first batch does, so a standby's takeover finds them ready:
    the JVM's classes loaded and code generated, the Python worker daemon forked with pandas and
    Arrow imported (the stateful operators are pandas functions), and, with `topic`, the Kafka
    connector loaded and a consumer's connection made."""
    spark.range(1000).selectExpr("sum(id) AS s", "count(distinct id % 7) AS d").collect()
    (spark.range(64).selectExpr("id % 4 AS k", "id AS v").groupBy("k")
     .applyInPandas(lambda df: df.head(1), "k long, v long").collect())
    if topic:
        # deferred: kafka-python loads only where Kafka is used
        from infra import kafka_client

        (spark.read.format("kafka").options(**kafka_client.spark_options(s or load()))
         .option("subscribe", topic).option("kafka.isolation.level", "read_committed")
         .option("startingOffsets", "earliest").option("endingOffsets", "latest")
         .load().limit(1).selectExpr("length(value) AS n").collect())
