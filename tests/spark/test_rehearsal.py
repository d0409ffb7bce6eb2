"""A warm standby's rehearsal: the job's own query plans run to their end over scratch records,
on the real Spark session, leaving nothing behind (no scratch folder, no query still running)."""
from __future__ import annotations

import dataclasses
import logging

import pytest

from infra.config import Settings
from pipelines import guarantees
from pipelines.fraud import job as fraud
from pipelines.usage import job as usage


@pytest.fixture
def no_empty_batches(spark):
    """As both jobs run (their TTL'd state and watermarks would otherwise ask for batch after batch
    without data, and an availableNow query would never end)."""
    key = "spark.sql.streaming.noDataMicroBatches.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, "false")
    yield
    spark.conf.set(key, before)


def test_each_job_rehearses_its_plans_to_the_end_and_leaves_nothing(spark, settings, tmp_path, no_empty_batches, caplog):
    # the fraud job's at the demo's size (the tests' standbys rehearse over fewer: tests/conftest.py)
    s = dataclasses.replace(settings, run_dir=tmp_path, standby_rehearsal_rows=Settings.standby_rehearsal_rows)
    with caplog.at_level(logging.INFO, logger=fraud.log.name):
        assert fraud.rehearse(spark, s, timeout_s=240)
    # every batch of the decisions plan, its two sources read whole: 6,000 transactions and 600 labels
    assert f"rehearsal: {fraud.REHEARSAL_BATCHES} batches, 6600 records read" in caplog.text
    policies = [guarantees.policy(g) for g in ("at-most-once", "at-least-once", "exactly-once")]
    assert usage.rehearse(spark, s, policies, windows=True, timeout_s=240)
    assert list(tmp_path.iterdir()) == []  # the scratch folders and checkpoints are gone
    assert not [q.name for q in spark.streams.active if "rehearsal" in (q.name or "")]


def test_a_promotion_stops_the_rehearsal_at_once(spark, settings, tmp_path, no_empty_batches):
    s = dataclasses.replace(settings, run_dir=tmp_path)
    assert not fraud.rehearse(spark, s, cancel=lambda: True)
    assert not spark.streams.active
