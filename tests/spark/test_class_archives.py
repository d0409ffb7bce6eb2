"""The class archives `make setup` writes (infra/jvm.py) are the ones the JVMs map: the test
session's Spark driver was started with its archive, and the JDK accepts each archive, with
sharing required (-Xshare:on), on the class path its JVM really runs with — and refuses it on
another, so a stale archive is never half used."""
from __future__ import annotations

import subprocess

import pytest

from infra import broker, jvm
from pipelines.engine import cds


def accepts(archive, class_path: str) -> bool:
    java = str(jvm.java_binary())
    done = subprocess.run([java, "-Xshare:on", f"-XX:SharedArchiveFile={archive}", "-cp", class_path, "-version"],
                          capture_output=True, text=True, timeout=60)
    return done.returncode == 0


def built(path, what):
    if path is None or not path.exists():
        pytest.fail(f"No class archive for {what} at {path}: `make setup` writes it (make test runs setup first).")
    return path


def test_the_spark_driver_maps_the_archive_made_for_its_class_path(spark, settings):
    archive = built(cds.archive(settings), "the Spark driver")
    runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert f"-XX:SharedArchiveFile={archive}" in list(runtime.getInputArguments())
    class_path = spark._jvm.java.lang.System.getProperty("java.class.path")
    assert accepts(archive, class_path)
    assert not accepts(archive, f"{settings.kafka_jars}/*"), "a JVM on other jars must refuse it"


def test_the_broker_archive_is_accepted_on_the_broker_s_class_path(settings):
    archive = built(broker.class_archive(settings), "the Kafka broker")
    assert accepts(archive, f"{settings.kafka_jars}/*")
    assert not accepts(archive, f"{settings.spark_jars}/*")


def test_the_jvm_start_bench_runs_and_prints_its_figures():
    """`python -m bench jvm-start` at its smallest size (one round): its JSON keys, and every figure
    a time (issue 37 item 8: every bench runs in the suite)."""
    from bench import jvm_start

    out = jvm_start.main(["--rounds", "1"])
    keys = {"rounds", "cpus", "load_average_1m", "session_s", "session_ratio", "first_query_s", "first_query_ratio",
            "broker_up_s", "broker_up_ratio"}
    assert set(out) == keys, set(out) ^ keys
    for name in ("session_s", "first_query_s", "broker_up_s"):
        assert set(out[name]) == {"archive", "none"} and min(out[name].values()) > 0, out[name]
        ratio = out[name.replace("_s", "_ratio")]
        assert abs(ratio - out[name]["archive"] / out[name]["none"]) < 0.01
