"""The fraud-detection handbook's protocol, end to end through the real pipeline:

    python -m bench handbook [--data FILE] [--train-start 2018-07-25] [--train-days 7]
                             [--delay-days 7] [--test-days 7] [--json]

1. replays the history from the start of the file to the end of the test period onto fresh
   `transactions` and `labels` topics (`python -m simulator replay --max`: every label only once its
   feedback delay has passed in event time), so the 30-day windows are full when the test starts;
2. runs the real fraud job on them (`python -m pipelines.fraud --available-now`: the analyzers,
   the event-time features per card and per terminal with the labels joined in, the aggregator,
   the exactly-once sinks), with LABEL_DELAY_DAYS = the protocol's delay;
3. reads every decision back from the exactly-once `decisions` topic (read_committed), and scores
   the test period after the handbook's exclusions (pipelines/fraud/handbook.py): AUC ROC, average
   precision, card precision@100, per scenario.

The last line is one JSON object: {auc_roc, average_precision, card_precision_at_100,
test_transactions, test_frauds, undecided, duplicates, model, replay_tx_per_s, job_tx_per_s,
wall_s, per_scenario, ...}. Every replayed transaction must be decided exactly once, or it fails.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pandas as pd

from bench.common import delete_topics, logger, own_broker
from infra import kafka_client
from infra.config import ROOT, load
from pipelines.fraud import handbook

log = logger("handbook")
JOB_TIMEOUT_S = 3_600.0


def parse(argv: list[str], s) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench handbook", description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(s.handbook_data), help="the history (HANDBOOK_DATA)")
    p.add_argument("--train-start", default=str(handbook.HANDBOOK_TRAIN_START))
    p.add_argument("--train-days", type=int, default=7)
    p.add_argument("--delay-days", type=int, default=7)
    p.add_argument("--test-days", type=int, default=7)
    p.add_argument("--from", dest="start", default=None,
                   help="replay from this day (default: the start of the file, so 30-day windows are full)")
    p.add_argument("--max-offsets-per-trigger", type=int, default=100_000,
                   help="the job's batch bound while it drains the replayed history")
    p.add_argument("--keep", action="store_true", help="keep the work folder and topics")
    p.add_argument("--json", action="store_true", help="(the result is always printed as JSON)")
    a = p.parse_args(argv)
    try:
        a.protocol = handbook.Protocol(dt.date.fromisoformat(a.train_start), a.train_days, a.delay_days, a.test_days)
    except ValueError as exc:
        p.error(str(exc))
    return a


def replay(env: dict, data: str, start: str | None, end: dt.date, delay_days: int) -> dict:
    """`python -m simulator replay` as a user runs it; its totals (the last line, JSON)."""
    last = (end - dt.timedelta(days=1)).isoformat()
    cmd = [sys.executable, "-m", "simulator", "replay", data, "--max", "--to", last,
           "--label-delay-days", str(delay_days)] + (["--from", start] if start else [])
    log(" ".join(cmd[1:]))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    if proc.returncode:
        raise SystemExit(f"bench handbook: the replay exited with code {proc.returncode}.")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_job(env: dict, work, max_offsets: int) -> float:
    """The fraud job on the replayed topics until it has decided everything there; seconds."""
    cmd = [sys.executable, "-m", "pipelines.fraud", "--available-now", "--starting-offsets", "earliest",
           "--checkpoint", str(work / "checkpoint"), "--store", str(work / "store.db"),
           "--max-offsets-per-trigger", str(max_offsets)]
    t0 = time.monotonic()
    with open(work / "job.log", "w") as job_log:
        job = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=job_log, stderr=subprocess.STDOUT)
        try:
            code = job.wait(JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
            raise SystemExit(f"bench handbook: the fraud job did not finish within {JOB_TIMEOUT_S:g} s; "
                             f"see {work / 'job.log'}.") from None
    if code:
        raise SystemExit(f"bench handbook: the fraud job exited with code {code}; see {work / 'job.log'}.")
    return time.monotonic() - t0


def read_decisions(s, topic: str) -> pd.DataFrame:
    """Every committed decision of `topic` (read_committed): txn_id, score, is_fraud."""
    consumer = kafka_client.consumer(s, topic, auto_offset_reset="earliest", max_poll_records=50_000,
                                     fetch_max_bytes=64 << 20, max_partition_fetch_bytes=16 << 20,
                                     isolation_level="read_committed")
    ids, scores, flags = [], [], []
    try:
        from kafka import TopicPartition

        parts = [TopicPartition(topic, p) for p in kafka_client.partitions(consumer, topic)]
        ends = consumer.end_offsets(parts)
        idle = time.monotonic()
        while time.monotonic() - idle < 30 and any(consumer.position(tp) < ends[tp] for tp in parts):
            for records in consumer.poll(timeout_ms=1_000).values():
                idle = time.monotonic()
                for m in records:
                    d = json.loads(m.value)
                    ids.append(d["txn_id"])
                    scores.append(d["score"])
                    flags.append(d["is_fraud"])
    finally:
        consumer.close()
    return pd.DataFrame({"txn_id": ids, "score": scores, "is_fraud": flags})


def figures(history: pd.DataFrame, decisions: pd.DataFrame, protocol) -> dict:
    """The protocol's figures from the replayed history and the decisions read back (pure)."""
    counts = decisions["txn_id"].value_counts()
    duplicates = int((counts - 1).sum())
    decided = decisions.drop_duplicates("txn_id")
    scored = history.merge(decided, on="txn_id", how="left")
    undecided = scored["score"].isna()
    test = handbook.test_frame(scored, protocol)
    test_undecided = int(test["score"].isna().sum())
    result = handbook.evaluate(test[test["score"].notna()])
    result.update(undecided=int(undecided.sum()), test_undecided=test_undecided, duplicates=duplicates,
                  decided=int(len(decided)), replayed=int(len(history)))
    return result


def main(argv: list[str]) -> dict:
    s = load()
    a = parse(argv, s)
    protocol = a.protocol
    tag = uuid.uuid4().hex[:8]
    work = s.run_dir / f"bench-handbook-{tag}"
    work.mkdir(parents=True, exist_ok=True)
    topics = {var: f"bench-handbook-{kind}-{tag}" for var, kind in
              (("TOPIC_TRANSACTIONS", "tx"), ("TOPIC_LABELS", "labels"), ("TOPIC_DECISIONS", "decisions"),
               ("TOPIC_DLQ", "dlq"), ("TOPIC_MARKERS", "markers"), ("TOPIC_DECISIONS_RT", "rt"),
               ("TOPIC_FEATURES", "features"))}
    env = {**os.environ, **topics, "PYTHONPATH": str(ROOT), "LABEL_DELAY_DAYS": str(protocol.delay_days),
           "CARDSTREAM_DB": str(work / "store.db"), "CHECKPOINT_ROOT": str(work / "checkpoints")}
    t0 = time.monotonic()
    history = handbook.load_history(a.data, start=a.start, end=protocol.test.end)
    log(f"{len(history):,} transactions from {history['event_time'].min()} to {history['event_time'].max()}; "
        f"protocol {protocol.describe()}")
    with own_broker(s, log):
        from infra.topics import ensure_topics

        ensure_topics(list(topics.values()), s=s)
        totals = replay(env, a.data, a.start, protocol.test.end, protocol.delay_days)
        log(f"replayed {totals.get('sent'):,} transactions at {totals.get('tx_per_s')} tx/s; running the fraud job")
        job_s = run_job(env, work, a.max_offsets_per_trigger)
        log(f"the fraud job decided the history in {job_s:.1f} s; reading the decisions back")
        decisions = read_decisions(s, topics["TOPIC_DECISIONS"])
        if not a.keep:
            delete_topics(s, tag, log)
    result = figures(history, decisions, protocol)
    result.update(model="rules (model 0)", protocol=protocol.describe(), replay_tx_per_s=totals.get("tx_per_s"),
                  job_s=round(job_s, 1), job_tx_per_s=round(len(history) / job_s, 1),
                  wall_s=round(time.monotonic() - t0, 1), threshold=s.fraud_threshold)
    if result["undecided"] or result["duplicates"]:
        print(json.dumps(result), flush=True)
        raise SystemExit(f"bench handbook: {result['undecided']} transactions undecided and "
                         f"{result['duplicates']} decided twice; the job's log is kept at {work / 'job.log'}.")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return result
