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
   precision, card precision@100, per scenario;
4. (unless --rules-only) trains a model on the training window from that run's feature log and the
   labels known by the end of the delay (`python -m pipelines.fraud.train`: the kind chosen on the
   validation period before it), then runs the fraud job again on the same replayed topics, from a
   fresh checkpoint, with that model loaded at its start, and scores the test period the same way.
   The model decides in the job; nothing here scores offline.

The last line is one JSON object: {auc_roc, average_precision, card_precision_at_100,
test_transactions, test_frauds, undecided, duplicates, model, replay_tx_per_s, job_tx_per_s,
wall_s, per_scenario, rules: {...}, learned: {...}, ...}: the headline figures are the learned
model's (the rules' with --rules-only). Every replayed transaction must be decided exactly once, or it fails.
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

from bench.common import delete_topics, logger, own_broker, wait_job
from infra import kafka_client
from infra.config import ROOT, load
from infra.history import load_history
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
    p.add_argument("--rules-only", dest="model", action="store_false",
                   help="measure the rules alone (by default a model is also trained on the training window "
                        "with `python -m pipelines.fraud.train` and the job runs again with it)")
    p.add_argument("--keep", action="store_true", help="keep the work folder and topics")
    p.add_argument("--json", action="store_true", help="(the result is always printed as JSON)")
    a = p.parse_args(argv)
    try:
        a.protocol = handbook.Protocol(dt.date.fromisoformat(a.train_start), a.train_days, a.delay_days, a.test_days)
    except ValueError as exc:
        p.error(str(exc))
    return a


def replay(env: dict, data: str, start: str | None, last: dt.date, delay_days: int) -> dict:
    """`python -m simulator replay` as a user runs it, up to the day `last` included; its totals
    (the last line, JSON)."""
    cmd = [sys.executable, "-m", "simulator", "replay", data, "--max", "--to", last.isoformat(),
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
        code = wait_job(job, "handbook", work / "job.log", JOB_TIMEOUT_S)
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


def train(env: dict, protocol) -> dict:
    """`python -m pipelines.fraud.train` on the protocol's training window, as a user runs it."""
    end = protocol.train.end - dt.timedelta(days=1)
    cmd = [sys.executable, "-m", "pipelines.fraud.train", "--from", str(protocol.train.start), "--to", str(end),
           "--delay-days", str(protocol.delay_days)]
    log(" ".join(cmd[1:]))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    if proc.returncode:
        raise SystemExit(f"bench handbook: training exited with code {proc.returncode}.")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def copy_models(source, target) -> None:
    """The `models` rows of one store into another (the model run's fresh store)."""
    from controlplane.store import connect

    src, dst = connect(source), connect(target)
    try:
        rows = [dict(r) for r in src.query("SELECT * FROM models")]
        with dst.conn:
            dst["models"].insert_all(rows, replace=True)
    finally:
        src.conn.close()
        dst.conn.close()


def world(base_env: dict, work, tag: str, name: str) -> tuple[dict, dict]:
    """One run's own decisions, features, dead letters, markers, store and checkpoints; the
    replayed transactions and labels are shared."""
    topics = {var: f"bench-handbook-{name}-{kind}-{tag}" for var, kind in
              (("TOPIC_DECISIONS", "decisions"), ("TOPIC_DLQ", "dlq"), ("TOPIC_MARKERS", "markers"),
               ("TOPIC_DECISIONS_RT", "rt"), ("TOPIC_FEATURES", "features"))}
    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    return {**base_env, **topics, "CARDSTREAM_DB": str(folder / "store.db"),
            "CHECKPOINT_ROOT": str(folder / "checkpoints")}, topics


def measure_run(s, env: dict, topics: dict, work, history, protocol, max_offsets: int) -> dict:
    job_s = run_job(env, work, max_offsets)
    log(f"the fraud job decided the history in {job_s:.1f} s ({len(history) / job_s:,.0f} tx/s); "
        f"reading the decisions back")
    result = figures(history, read_decisions(s, topics["TOPIC_DECISIONS"]), protocol)
    result.update(job_s=round(job_s, 1), job_tx_per_s=round(len(history) / job_s, 1))
    return result


def record(s, run_id: str, result: dict, protocol) -> None:
    """One `handbook_runs` row per aggregator of this run (the dashboard's headline quality)."""
    from controlplane.store import connect, transaction

    db = connect(s=s)
    try:
        with transaction(db):
            for r in result.values():
                db["handbook_runs"].insert({
                    "run_id": run_id, "ts": int(time.time() * 1000), "model": r["model"],
                    "model_version": r.get("training", {}).get("version", 0),
                    **{k: r[k] for k in ("auc_roc", "average_precision", "card_precision_at_100",
                                         "test_transactions", "test_frauds")},
                    "protocol": json.dumps(protocol.describe()), "per_scenario": json.dumps(r["per_scenario"]),
                    "card_precision_per_day": json.dumps(r.get("card_precision_at_100_per_day"))})
    finally:
        db.conn.close()


def main(argv: list[str]) -> dict:
    s = load()
    a = parse(argv, s)
    protocol = a.protocol
    tag = uuid.uuid4().hex[:8]
    work = s.run_dir / f"bench-handbook-{tag}"
    work.mkdir(parents=True, exist_ok=True)
    shared = {"TOPIC_TRANSACTIONS": f"bench-handbook-tx-{tag}", "TOPIC_LABELS": f"bench-handbook-labels-{tag}"}
    base = {**os.environ, **shared, "PYTHONPATH": str(ROOT), "LABEL_DELAY_DAYS": str(protocol.delay_days)}
    t0 = time.monotonic()
    first_day = dt.date.fromisoformat(a.start) if a.start else None
    history = handbook.history_frame(load_history(handbook.history_file(a.data), start=first_day, end=protocol.test.last))
    log(f"{len(history):,} transactions from {history['event_time'].min()} to {history['event_time'].max()}; "
        f"protocol {protocol.describe()}")
    rules_env, rules_topics = world(base, work, tag, "rules")
    model_env, model_topics = world(base, work, tag, "model")
    with own_broker(s, log):
        from infra.topics import ensure_topics

        ensure_topics([*shared.values(), *rules_topics.values(), *(model_topics.values() if a.model else ())], s=s)
        totals = replay(base, a.data, a.start, protocol.test.last, protocol.delay_days)
        log(f"replayed {totals.get('sent'):,} transactions at {totals.get('tx_per_s')} tx/s; the fraud job, rules")
        rules = measure_run(s, rules_env, rules_topics, work / "rules", history, protocol, a.max_offsets_per_trigger)
        rules["model"] = "rules (model 0)"
        result = {"rules": rules}
        if a.model:
            trained = train(rules_env, protocol)
            log(f"model {trained['version']}: {trained['kind']} {trained['params']}; the fraud job again, with it")
            copy_models(work / "rules" / "store.db", work / "model" / "store.db")
            learned = measure_run(s, model_env, model_topics, work / "model", history, protocol,
                                  a.max_offsets_per_trigger)
            learned["model"] = f"{trained['kind']} (model {trained['version']})"
            learned["training"] = trained
            result["learned"] = learned
        if not a.keep:
            delete_topics(s, tag, log)
    headline = result.get("learned", rules)
    out = {**{k: headline[k] for k in ("auc_roc", "average_precision", "card_precision_at_100", "test_transactions",
                                       "test_frauds", "per_scenario", "model")},
           "undecided": sum(r["undecided"] for r in result.values()),
           "duplicates": sum(r["duplicates"] for r in result.values()),
           **result, "protocol": protocol.describe(), "replay_tx_per_s": totals.get("tx_per_s"),
           "replayed": int(len(history)), "job_tx_per_s": rules["job_tx_per_s"],
           "wall_s": round(time.monotonic() - t0, 1), "threshold_rules": s.fraud_threshold}
    if out["undecided"] or out["duplicates"]:
        print(json.dumps(out), flush=True)
        raise SystemExit(f"bench handbook: {out['undecided']} transactions undecided and {out['duplicates']} decided "
                         f"twice; the jobs' logs are kept under {work}.")
    record(s, uuid.uuid4().hex[:12], result, protocol)
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return out
