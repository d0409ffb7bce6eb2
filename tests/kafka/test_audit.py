"""The audit: truth read from real Kafka topics vs the store, incrementally, and its CLI."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

from bench.guarantees import decision, produce
from infra.config import ROOT, Topics
from pipelines import audit, guarantees
from pipelines.guarantees import BatchResult
from pipelines.usage.job import record_start


def test_amo_truth_counts_only_txns_seen_since_its_first_start():
    log = audit.TopicLog(facts={"a": (0, 3, True), "b": (0, 9, False), "c": (1, 1, True), "d": (1, 7, True)})
    assert audit.amo_truth(log, {"0": 5, "1": 2}) == (2, 1)   # b and d
    assert audit.amo_truth(log, None) == (0, 0)                # never started: nothing owed


def test_fraud_figures_precision_recall_and_losses():
    labels = {"t1": (True, "burst"), "t2": (False, "normal"), "t3": (True, "far"), "t4": (False, "normal"),
              "bad1": (False, "bad:json")}
    observed = {"t1": True, "t2": True, "t4": False}
    got = audit.fraud_figures({"t1", "t2", "t3", "t4"}, labels, observed, decision_records=5, decision_distinct=3)
    assert got == {"truth": 4, "observed": 3, "lost": 1, "duplicated": 2, "precision": 0.5, "recall": 1.0}
    observed["t3"] = False  # decided, and missed
    assert audit.fraud_figures({"t1", "t2", "t3", "t4"}, labels, observed, 5, 4)["recall"] == 0.5


def _settings(settings, topic, store_path):
    names = Topics(transactions=topic("tx"), labels=topic("labels"), decisions=topic("decisions"),
                   dead_letters="unused", partitions=2)
    return dataclasses.replace(settings, topics=names, store_path=store_path)


def test_snapshot_reads_kafka_truth_incrementally_and_records_it(kafka, settings, topic, store, tmp_path):
    s = _settings(settings, topic, tmp_path / "cardstream.db")
    early = [decision(i, i % 4 == 0) for i in range(20)]
    produce(kafka, s.topics.decisions, early + early[:5])             # 5 duplicates, at least once
    from pipelines.usage.job import latest_offsets
    record_start(store, "at-most-once", s.topics.decisions, latest_offsets(s.topics.decisions, s))
    late = [decision(i, i % 4 == 0) for i in range(20, 30)]
    produce(kafka, s.topics.decisions, late)
    txns = [{"txn_id": d["txn_id"], "card_id": d["card_id"]} for d in early + late]
    produce(kafka, s.topics.transactions, txns + [{"txn_id": "junk-1", "card_id": "x"}])
    labels = [{"txn_id": d["txn_id"], "is_fraud": d["is_fraud"], "pattern": "p"} for d in early + late]
    produce(kafka, s.topics.labels, labels + [{"txn_id": "junk-1", "is_fraud": False, "pattern": "bad:json"}])
    store["decisions"].insert_all([{"txn_id": d["txn_id"], "is_fraud": int(d["is_fraud"])} for d in early])
    epoch = 1
    guarantees.write_exactly_once(store, BatchResult(0, 30, 8), epoch)
    guarantees.write_at_least_once(store, BatchResult(0, 35, 9), epoch)
    guarantees.write_at_most_once(store, BatchResult(0, 7, 2), epoch)

    snap = audit.snapshot(s, store)
    fraud_truth = sum(d["is_fraud"] for d in early + late)
    assert snap["usage"]["exactly-once"] == {"truth": 30, "observed": 30, "lost": 0, "duplicated": 0,
                                            "fraud_truth": fraud_truth, "fraud_observed": 8}
    assert snap["usage"]["at-least-once"]["duplicated"] == 5
    assert snap["usage"]["at-most-once"]["truth"] == 10  # only what came after its first start
    assert snap["usage"]["at-most-once"]["lost"] == 3
    f = snap["fraud"]
    assert (f["truth"], f["observed"], f["lost"], f["duplicated"]) == (30, 20, 10, 5)
    assert f["precision"] == 1.0 and f["recall"] == 1.0  # of the 20 decided; 10 are not decided yet

    produce(kafka, s.topics.decisions, [decision(i, False) for i in range(30, 40)])  # read incrementally
    assert audit.snapshot(s, store)["usage"]["exactly-once"]["truth"] == 40
    assert audit.record(store, snap) == 9
    assert {r["metric"] for r in store["audit"].rows} == {"decisions", "processed", "fraud", "precision", "recall"}


def test_cli_prints_one_json_line_last(kafka, settings, topic, tmp_path):
    s = _settings(settings, topic, tmp_path / "cli.db")
    produce(kafka, s.topics.decisions, [decision(i, True) for i in range(3)])
    env = dict(os.environ, TOPIC_DECISIONS=s.topics.decisions, TOPIC_TRANSACTIONS=s.topics.transactions,
               TOPIC_LABELS=s.topics.labels, CARDSTREAM_DB=str(s.store_path), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "pipelines.audit", "--json", "--record"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    snap = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(snap) == {"fraud", "usage"}
    assert snap["usage"]["at-least-once"]["truth"] == 3 and snap["usage"]["at-least-once"]["lost"] == 3
    assert snap["usage"]["exactly-once"]["fraud_truth"] == 3
