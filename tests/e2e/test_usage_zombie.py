"""A zombie of the usage job, then a crash of its replacement, with upstream copies of older
decisions throughout (issue 73 item 5): the scenario `bench guarantees` runs as `zombie`, on real
Kafka, Spark and SQLite, its figures from the consistent-cut audit.

The job is frozen (its JVM too) between two writes; a replacement on the same checkpoints takes the
lease and commits batches on the exactly-once state Spark keeps in the checkpoint; the zombie wakes
and is fenced (exit 3) or stopped by Spark (exit 4); the replacement is SIGKILLed and restarted, so
its state is rebuilt from the checkpoint, whatever the zombie wrote into it after waking. Every
second copy the producer sends is of a decision sent 20 s or more before it (up to 300 s: as long
as the run has lasted), so the dedupe must remember ids across the zombie and the restart.
"""
from __future__ import annotations

import pytest

from bench import guarantees as scenarios
from infra.config import load

pytestmark = pytest.mark.timeout(600)


def test_exactly_once_is_the_truth_after_a_zombie_and_a_crash_of_its_replacement(kafka, tmp_path):
    out = scenarios.zombie(load(), tmp_path, duplicate_rate=0.1, copy_ages=(20, 300), seconds=60)
    print(f"zombie scenario: {out}")
    eo, alo = out["exactly-once"], out["at-least-once"]
    assert out["zombie_exit"] in (3, 4), out          # fenced, or stopped by Spark: never a write of it
    assert out["upstream_duplicates_sent"] > 50, out  # the copies are there (and 20 s old or more)
    assert alo["upstream"] > 0 and alo["lost"] == 0, out
    assert eo["truth"] > 0 and eo["lost"] == 0 and eo["duplicated"] == 0 and eo["observed"] == eo["truth"], out
