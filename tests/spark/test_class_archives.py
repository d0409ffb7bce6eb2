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
