"""The one SparkSession factory: local jars, RocksDB state, sized for a small machine, quiet."""
from __future__ import annotations

import os
import sys

from infra.config import Settings, load
from infra.jars import is_complete


def connector_jars(s: Settings) -> list[str]:
    if not is_complete(s.spark_jars, "spark"):
        raise SystemExit(f"The Spark-Kafka connector jars in {s.spark_jars} are missing or "
                         f"incomplete; run `make setup`.")
    return sorted(str(p) for p in s.spark_jars.glob("*.jar"))


def get_spark(app_name: str = "cardstream", s: Settings | None = None, **extra_conf):
    """Return the SparkSession for this process (created once, shared after that).

    PYSPARK_PYTHON is pinned to the running interpreter so Python workers see the virtualenv's
    packages; the connector jars are local files so nothing is downloaded at job start.
    """
    from pyspark.sql import SparkSession

    s = s or load()
    if s.spark_ui and s.spark_master.startswith("local"):
        # the UI (and the driver) bind to loopback only: it has no login. Not on a cluster, whose
        # executors must reach the driver.
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
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.streaming.minBatchesToRetain", str(s.min_batches_to_retain))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "true" if s.spark_ui else "false")
        # port 4040, or the next free one (jobs, standbys and tests side by side): spark.port.maxRetries
        .config("spark.ui.killEnabled", "false")
        .config("spark.ui.retainedJobs", "200").config("spark.ui.retainedStages", "200")
        .config("spark.sql.ui.retainedExecutions", "100")
        .config("spark.sql.streaming.ui.retainedProgressUpdates", "200")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.memory", os.environ.get("SPARK_DRIVER_MEMORY", "2g"))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.warehouse.dir", str(s.run_dir / "spark-warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={s.run_dir}")
    )
    for key, value in extra_conf.items():
        builder = builder.config(key.replace("_", "."), value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "ERROR"))
    return spark


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
        from infra import kafka_client

        (spark.read.format("kafka").options(**kafka_client.spark_options(s or load()))
         .option("subscribe", topic).option("kafka.isolation.level", "read_committed")
         .option("startingOffsets", "earliest").option("endingOffsets", "latest")
         .load().limit(1).selectExpr("length(value) AS n").collect())
