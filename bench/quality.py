"""Fraud quality on traffic the analyzers never saw: `python -m bench quality [--seed S] [--cards N] --json`.

Draws the evaluation set (simulator/evaluation.py: its own seed and rules, legitimate look-alikes
included), sends it to a fresh transactions topic, runs the real fraud job on it
(`python -m pipelines.fraud --available-now`: the stateful analyzers and the aggregator exactly as
deployed, limits untouched) and reads its decisions back from the exactly-once `decisions` topic
(read_committed). Every transaction must be decided, or the bench fails.

Figures per fraud pattern, each measured against every legitimate transaction (so precision says
how many alarms are right when this were the only fraud): precision and recall of `is_fraud` at
the job's threshold (FRAUD_THRESHOLD), and the average precision of `score` (the threshold-free
area under the precision-recall curve, as scikit-learn computes it: ties one step). Per
legitimate pattern: the share of its transactions flagged. `all`: every fraud against every
legitimate transaction. They are written to the store's `quality` table (one run id) for the
dashboard. The last line is one JSON object; progress goes to stderr.

`--realtime` also runs the real-time path (`--mode realtime`: its live profiles in the JVM) on the
same set, read back from `decisions-rt` once every transaction is decided there: its figures go
under `realtime`, and `realtime_recall_ratio` is its recall over the stateful path's.

The learned model (unless `--rules-only`), trained only on traffic it is not evaluated on
(`training_plan`): TRAIN_SEGMENTS segments per protocol window, each drawn by the same generator
with its own seed (the evaluation's + 1, + 2, ...) and its own ids (cards and terminals "tr<k>-"),
as long as the evaluation set and on whole UTC days before it, sent as a replayed history (their
times are weeks old), through the real fraud job (its feature log), then
`python -m pipelines.fraud.train` on them with the labels known after the feedback delay
(LABEL_DELAY_DAYS; train chooses the kind on the validation window before the training window) so
that the model goes live (`as_of`) before the evaluation set starts; then the fraud job on the
evaluation set again, from a fresh checkpoint, with that model in its store (loaded at start:
every decision must carry its version). The evaluation's labels are read by nothing but `join`.
No job gets label feedback (no labels topic is fed, as in the rules' run): the set spans days,
within the delay, so a terminal's risk windows (ending the delay before a payment) are empty on it,
in training as in evaluation. Top-level figures and `patterns` are the rules' (as before), also
summed up under `rules`; the model's, per pattern too, are under `model`.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass

from bench.common import logger, own_broker, wait_job
from controlplane.clock import now_ms
from infra import kafka_client
from infra.config import ROOT, Settings, load
from infra.histories import REPLAY_HEADER
from infra.topics import ensure_topics
from pipelines.fraud import handbook
from simulator import evaluation

log = logger("quality")
JOB_TIMEOUT_S = 900.0
END_MARGIN_MS = 60_000  # the set ends a minute before now: inside the job's validation window
DAY_MS = 86_400_000
TRAIN_SEGMENTS = 2      # training segments per protocol window (the training window, the validation's)
TRAIN_TIMEOUT_S = 1_800.0


# --- plain functions (tested without Kafka or Spark) ------------------------------------------

def average_precision(truth: list[bool], scores: list[float]) -> float | None:
    """Average precision of `scores` for the positives in `truth` (None without positives).

    Sum over the distinct score thresholds, highest first, of (recall gained) x (precision there);
    transactions with equal scores enter together, as in scikit-learn's average_precision_score.
    """
    positives = sum(truth)
    if not positives:
        return None
    pairs = sorted(zip(scores, truth), key=lambda p: -p[0])
    tp = fp = 0
    ap = 0.0
    i = 0
    while i < len(pairs):
        j = i
        gained = 0
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            gained += pairs[j][1]
            tp += pairs[j][1]
            fp += not pairs[j][1]
            j += 1
        ap += gained / positives * tp / (tp + fp)
        i = j
    return ap


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def pattern_figures(rows: list[tuple[str, bool, float, bool]]) -> dict[str, dict]:
    """(pattern, is fraud per label, score, flagged) per transaction -> figures per pattern and `all`.

    A fraud pattern is measured on its own transactions plus every legitimate one; a legitimate
    pattern by the share of it flagged.
    """
    legit = [r for r in rows if not r[1]]
    legit_flagged = sum(1 for r in legit if r[3])
    out: dict[str, dict] = {}

    def fraud_figures(frauds):
        tp = sum(1 for r in frauds if r[3])
        subset = frauds + legit
        return {"kind": "fraud", "transactions": len(frauds), "flagged": tp,
                "precision": _rounded(tp / (tp + legit_flagged)) if tp + legit_flagged else None,
                "recall": _rounded(tp / len(frauds)) if frauds else None,
                "average_precision": _rounded(average_precision([r[1] for r in subset], [r[2] for r in subset])),
                "flagged_share": _rounded(tp / len(frauds)) if frauds else None}

    for pattern in sorted({r[0] for r in rows}, key=lambda p: (p not in evaluation.FRAUD, p)):
        mine = [r for r in rows if r[0] == pattern]
        if mine[0][1]:
            out[pattern] = fraud_figures(mine)
        else:
            flagged = sum(1 for r in mine if r[3])
            out[pattern] = {"kind": "legitimate", "transactions": len(mine), "flagged": flagged,
                            "precision": None, "recall": None, "average_precision": None,
                            "flagged_share": _rounded(flagged / len(mine))}
    out["all"] = fraud_figures([r for r in rows if r[1]])
    out["all"]["kind"] = "all"
    return out


def join(labels: list[dict], decisions: list[dict]) -> tuple[list[tuple[str, bool, float, bool]], list[str], int]:
    """Labels x decisions by txn_id -> (rows for pattern_figures, undecided ids, duplicates)."""
    seen: dict[str, dict] = {}
    duplicates = 0
    for d in decisions:
        if d["txn_id"] in seen:
            duplicates += 1
        else:
            seen[d["txn_id"]] = d
    rows, undecided = [], []
    for l in labels:
        d = seen.get(l["txn_id"])
        if d is None:
            undecided.append(l["txn_id"])
        else:
            rows.append((l["pattern"], bool(l["is_fraud"]), float(d["score"]), bool(d["is_fraud"])))
    return rows, undecided, duplicates


def _day(ms: int) -> dt.date:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).date()


def _ms(day: dt.date) -> int:
    return int(dt.datetime.combine(day, dt.time(), dt.timezone.utc).timestamp() * 1000)


@dataclass(frozen=True)
class Segment:
    """One training draw: the evaluation's generator with its own seed and ids, ending at `end_ms`."""
    seed: int
    prefix: str
    end_ms: int
    days: float


@dataclass(frozen=True)
class TrainingPlan:
    """What the learned model is trained on, and the `python -m pipelines.fraud.train` window."""
    segments: tuple[Segment, ...]
    train_from: dt.date   # --from
    train_to: dt.date     # --to (its last day)
    delay_days: int
    as_of_ms: int         # train's default --as-of: the labels known then; the model goes live then

    def describe(self) -> dict:
        def day(ms):
            return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
        return {"seeds": [g.seed for g in self.segments], "prefixes": [g.prefix for g in self.segments],
                "segments": [f"{day(g.end_ms - int(g.days * DAY_MS))}..{day(g.end_ms)}" for g in self.segments],
                "train": f"{self.train_from}..{self.train_to}", "delay_days": self.delay_days,
                "labels_known_by": day(self.as_of_ms)}


def training_plan(eval_start_ms: int, days: float, delay_days: int, seed: int) -> TrainingPlan:
    """Training traffic the evaluation set is not part of, placed so that the model could have been
    live before the evaluation's first payment (`eval_start_ms`).

    The training window is TRAIN_SEGMENTS slots of ceil(`days`) whole UTC days, ending `delay_days`
    before the day the evaluation starts: its last labels are known (train's default --as-of, the
    day after --to plus the delay) at that day's midnight. train's validation window (the protocol
    shifted back by the delay and the test period, handbook.Protocol.validation) gets as many
    slots. Each slot holds one segment of `days` from its start, drawn by the evaluation's rules
    with seed `seed` + 1, + 2, ... and ids "tr<k>-": new cards and terminals, as the evaluation set
    starts with cards the job has never seen (its card windows start empty there too)."""
    slot = math.ceil(days)
    window = TRAIN_SEGMENTS * slot
    train_from = _day(eval_start_ms) - dt.timedelta(days=window + delay_days)
    protocol = handbook.Protocol(train_from, window, delay_days, min(window, 7))
    starts = [w.start + dt.timedelta(days=k * slot) for w in (protocol.validation().train, protocol.train)
              for k in range(TRAIN_SEGMENTS)]
    segments = tuple(Segment(seed + 1 + k, f"tr{k}", _ms(start) + int(days * DAY_MS), days)
                     for k, start in enumerate(starts))
    train_to = protocol.train.end - dt.timedelta(days=1)
    return TrainingPlan(segments, train_from, train_to, delay_days,
                        _ms(train_to + dt.timedelta(days=1 + delay_days)))


def training_set(plan: TrainingPlan, cards: int) -> tuple[list[dict], list[dict]]:
    """The plan's segments as (transactions in event-time order, labels): each label with its
    payment's card, terminal and time and `known_at`, its time plus the feedback delay (train reads
    only the labels known by its --as-of)."""
    txns: list[dict] = []
    labels: list[dict] = []
    for g in plan.segments:
        t, l = evaluation.evaluation_set(g.seed, cards, g.end_ms, g.days, prefix=g.prefix)
        txns += t
        labels += [{**lab, "card_id": tx["card_id"], "merchant_id": tx["merchant_id"], "event_time": tx["event_time"],
                    "known_at": tx["event_time"] + plan.delay_days * DAY_MS} for tx, lab in zip(t, l)]
    order = sorted(range(len(txns)), key=lambda i: (txns[i]["event_time"], txns[i]["card_id"]))
    return [txns[i] for i in order], [labels[i] for i in order]


# --- the run ----------------------------------------------------------------------------------

def send(s: Settings, topic: str, txns: list[dict], headers: list | None = None) -> None:
    """The transactions in event-time order, keyed by card, stamped produced_at = now (`headers`:
    the replay header, for a set older than the job's live window)."""
    prod = kafka_client.producer(s, acks="all", linger_ms=20, batch_size=256 * 1024)
    try:
        now = int(time.time() * 1000)
        for t in txns:
            prod.send(topic, key=t["card_id"].encode(), value=json.dumps({**t, "produced_at": now}).encode(),
                      headers=headers)
        prod.flush()
    finally:
        prod.close()


def read_decisions(s: Settings, topic: str, expect: int, timeout_s: float = 60.0) -> list[dict]:
    """The committed decisions of `topic` (read_committed), until `expect` are read or it goes quiet."""
    consumer = kafka_client.consumer(s, topic, auto_offset_reset="earliest", consumer_timeout_ms=5_000,
                                     max_poll_records=5_000, isolation_level="read_committed")
    out: list[dict] = []
    deadline = time.monotonic() + timeout_s
    try:
        for m in consumer:
            out.append(json.loads(m.value))
            if len(out) >= expect or time.monotonic() > deadline:
                break
        return out
    finally:
        consumer.close()


def read_all(s: Settings, topic: str, want: set[str], timeout_s: float, alive) -> list[dict]:
    """The decisions of `topic` until every txn_id of `want` has one, the time is up, or `alive()`
    turns False (the job died)."""
    consumer = kafka_client.consumer(s, topic, auto_offset_reset="earliest", max_poll_records=5_000,
                                     isolation_level="read_committed")
    out: list[dict] = []
    missing = set(want)
    deadline = time.monotonic() + timeout_s
    try:
        while missing and time.monotonic() < deadline and alive():
            for records in consumer.poll(timeout_ms=1_000).values():
                for m in records:
                    d = json.loads(m.value)
                    out.append(d)
                    missing.discard(d.get("txn_id"))
        return out
    finally:
        consumer.close()


def measure(s: Settings, txns: list[dict], labels: list[dict], work, threshold: float | None = None,
            path: str = "stateful", headers: list | None = None) -> dict:
    """Send `txns` through the real fraud job (its own topics, checkpoint and store under `work`);
    {"figures", "undecided", "duplicates", "decided", "seconds", "decided_by" (decisions per model
    version), "features_topic" (its feature log)}. The caller owns the broker.

    `path` "stateful": the job in micro-batch mode, `--available-now`, read from `decisions`;
    "real-time": the job in real-time mode, read from `decisions-rt` until every transaction is
    decided there, then stopped."""
    tag = uuid.uuid4().hex[:8]
    tx, dec, dlq, marks, rt, lab, feat = (f"bench-quality-{name}-{tag}"
                                          for name in ("tx", "dec", "dlq", "marks", "rt", "labels", "features"))
    ensure_topics([tx, dec, dlq, marks, rt, lab, feat], s=s)
    send(s, tx, txns, headers)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "pipelines.fraud", "--transactions-topic", tx,
           "--decisions-topic", dec, "--dlq-topic", dlq, "--markers-topic", marks, "--realtime-topic", rt,
           "--labels-topic", lab, "--features-topic", feat,
           "--checkpoint", str(work / "checkpoint"), "--store", str(work / "store.db"),
           "--starting-offsets", "earliest"]
    cmd += ["--mode", "realtime"] if path == "real-time" else ["--available-now"]
    if threshold is not None:
        cmd += ["--threshold", str(threshold)]
    with open(work / "job.log", "w") as job_log:
        job = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=job_log, stderr=subprocess.STDOUT)
        if path == "real-time":
            decisions = read_all(s, rt, {l["txn_id"] for l in labels}, JOB_TIMEOUT_S,
                                 lambda: job.poll() is None)
            code = job.poll()
            job.send_signal(signal.SIGTERM)
            wait_job(job, "quality", work / "job.log", 120)
        else:
            code = wait_job(job, "quality", work / "job.log", JOB_TIMEOUT_S)
    seconds = time.monotonic() - t0
    if code:
        raise SystemExit(f"bench quality: the fraud job exited with code {code}; see {work / 'job.log'}.")
    if path != "real-time":
        decisions = read_decisions(s, dec, len(txns))
    rows, undecided, duplicates = join(labels, decisions)
    return {"figures": pattern_figures(rows) if rows else {}, "undecided": len(undecided),
            "undecided_ids": undecided[:5], "duplicates": duplicates, "decided": len(rows),
            "seconds": round(seconds, 1), "features_topic": feat,
            "decided_by": dict(Counter(str(d.get("model_version", 0)) for d in decisions))}


def send_labels(s: Settings, topic: str, labels: list[dict]) -> None:
    prod = kafka_client.producer(s, acks="all", linger_ms=20, batch_size=256 * 1024)
    try:
        for lab in labels:
            prod.send(topic, key=lab["txn_id"].encode(), value=json.dumps(lab).encode())
        prod.flush()
    finally:
        prod.close()


def learn(s: Settings, plan: TrainingPlan, cards: int, txns: list[dict], labels: list[dict], work) -> dict:
    """Train a model on the plan's traffic through the real job, then decide the evaluation set
    with it (module docstring): the `model` part of the result."""
    from bench.handbook import copy_models

    train_txns, train_labels = training_set(plan, cards)
    frauds = sum(lab["is_fraud"] for lab in train_labels)
    log(f"training set: {len(train_txns):,} transactions, {frauds:,} fraudulent ({plan.describe()}); the fraud job")
    t = measure(s, train_txns, train_labels, work / "train", headers=[(REPLAY_HEADER, b"bench-quality")])
    if t["undecided"] or t["duplicates"]:
        raise SystemExit(f"bench quality: the training run left {t['undecided']} transactions undecided and "
                         f"decided {t['duplicates']} twice; see {work / 'train' / 'job.log'}.")
    label_topic = f"bench-quality-train-labels-{uuid.uuid4().hex[:8]}"
    ensure_topics([label_topic], s=s)
    send_labels(s, label_topic, train_labels)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CARDSTREAM_DB": str(work / "train" / "store.db")}
    cmd = [sys.executable, "-m", "pipelines.fraud.train", "--from", str(plan.train_from), "--to", str(plan.train_to),
           "--delay-days", str(plan.delay_days), "--features-topic", t["features_topic"], "--labels-topic", label_topic]
    log(" ".join(cmd[1:]))
    started = time.monotonic()
    with open(work / "train" / "train.log", "w") as train_log:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=train_log, text=True,
                              timeout=TRAIN_TIMEOUT_S)
    if proc.returncode:
        raise SystemExit(f"bench quality: training exited with code {proc.returncode}; see {work / 'train' / 'train.log'}.")
    trained = json.loads(proc.stdout.strip().splitlines()[-1])
    train_s = time.monotonic() - started
    log(f"model {trained['version']}: {trained['kind']} {trained['params']}, threshold {trained['threshold']:.4f} "
        f"({train_s:.0f} s); the fraud job on the evaluation set with it")
    (work / "model").mkdir(parents=True, exist_ok=True)
    copy_models(work / "train" / "store.db", work / "model" / "store.db")
    m = measure(s, txns, labels, work / "model")
    figures = m["figures"].get("all", {})
    return {"version": trained["version"], "kind": trained["kind"], "params": json.loads(trained["params"]),
            "threshold": round(trained["threshold"], 4),
            "trained_on": {**plan.describe(), "cards_per_segment": cards, "transactions": len(train_txns),
                           "frauds": frauds, "train_rows": trained["train_rows"], "train_frauds": trained["train_frauds"]},
            "validation": {k: trained["validation"].get(k) for k in
                           ("train", "test", "window_days", "auc_roc", "average_precision", "card_precision_at_100")},
            "train_seconds": round(train_s, 1), "training_job_seconds": t["seconds"],
            "decided_by": m["decided_by"], "undecided": m["undecided"], "undecided_ids": m["undecided_ids"],
            "duplicates": m["duplicates"], "job_seconds": m["seconds"],
            **{k: figures.get(k) for k in ("precision", "recall", "average_precision")}, "patterns": m["figures"]}


def record(s: Settings, run_id: str, seed: int, threshold: float, figures: dict[str, dict]) -> None:
    """One `quality` row per pattern of this run, so the dashboard shows measured figures only."""
    # deferred: the store (sqlite-utils, pandas) loads only where used
    from controlplane.store import connect, transaction

    db = connect(s=s)
    try:
        ts = now_ms()
        with transaction(db):
            for pattern, f in figures.items():
                db["quality"].insert({"run_id": run_id, "ts": ts, "seed": seed, "threshold": threshold,
                                      "pattern": pattern, **f})
    finally:
        db.conn.close()


def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench quality")
    p.add_argument("--seed", type=int, default=evaluation.SEED, help="the evaluation set's seed")
    p.add_argument("--cards", type=int, default=evaluation.CARDS)
    p.add_argument("--days", type=float, default=evaluation.DAYS, help="event time the set spans")
    p.add_argument("--realtime", action="store_true",
                   help="also run the real-time path on the same set (`realtime`, `realtime_recall_ratio`)")
    p.add_argument("--rules-only", dest="model", action="store_false",
                   help="measure the rules alone (by default a model is also trained, on other traffic, and "
                        "measured on the same set: `model`)")
    p.add_argument("--json", action="store_true", help="(the result is always printed as JSON)")
    args = p.parse_args(argv)
    s = load()
    end_ms = int(time.time() * 1000) - END_MARGIN_MS
    try:
        txns, labels = evaluation.evaluation_set(args.seed, args.cards, end_ms, args.days)
    except ValueError as exc:
        p.error(str(exc))
    plan = training_plan(end_ms - int(args.days * DAY_MS), args.days, s.label_delay_days, args.seed)
    log(f"evaluation set: seed {args.seed}, {args.cards:,} cards, {len(txns):,} transactions, "
        f"{sum(l['is_fraud'] for l in labels):,} fraudulent")
    run_id = uuid.uuid4().hex[:12]
    work = s.run_dir / f"bench-quality-{run_id}"
    with own_broker(s, log):
        m = measure(s, txns, labels, work)
        rt = measure(s, txns, labels, work / "realtime", path="real-time") if args.realtime else None
        learned = learn(s, plan, args.cards, txns, labels, work) if args.model else None
    result = {"seed": args.seed, "cards": args.cards, "transactions": len(txns),
              "frauds": sum(l["is_fraud"] for l in labels), "threshold": s.fraud_threshold,
              "undecided": m["undecided"], "duplicates": m["duplicates"], "job_seconds": m["seconds"],
              "patterns": m["figures"], **{k: m["figures"].get("all", {}).get(k)
                                           for k in ("precision", "recall", "average_precision")}}
    result["rules"] = {"model_version": 0, "threshold": s.fraud_threshold, "decided_by": m["decided_by"],
                       **{k: result[k] for k in ("precision", "recall", "average_precision")}}
    if learned is not None:
        result["model"] = learned
    if rt is not None:
        figures = rt["figures"].get("all", {})
        result["realtime"] = {"undecided": rt["undecided"], "duplicates": rt["duplicates"],
                              "job_seconds": rt["seconds"], "patterns": rt["figures"],
                              **{k: figures.get(k) for k in ("precision", "recall", "average_precision")}}
        result["realtime_recall_ratio"] = (round(figures["recall"] / result["recall"], 4)
                                           if figures.get("recall") is not None and result["recall"] else None)
    if m["undecided"] or m["duplicates"] or (rt is not None and rt["undecided"]):
        print(json.dumps(result), flush=True)
        raise SystemExit(f"bench quality: {m['undecided']} transactions undecided (for instance "
                         f"{', '.join(m['undecided_ids'])}) and {m['duplicates']} decided twice by the "
                         f"stateful path; {rt['undecided'] if rt else 0} undecided by the real-time path; "
                         f"the job's log is kept at {work / 'job.log'}.")
    if learned is not None and (learned["undecided"] or learned["duplicates"]
                                or set(learned["decided_by"]) != {str(learned["version"])}):
        print(json.dumps(result), flush=True)
        raise SystemExit(f"bench quality: with model {learned['version']} in its store the job left "
                         f"{learned['undecided']} transactions undecided, decided {learned['duplicates']} twice, "
                         f"and its decisions name the versions {learned['decided_by']}; "
                         f"see {work / 'model' / 'job.log'}.")
    shutil.rmtree(work, ignore_errors=True)
    record(s, run_id, args.seed, s.fraud_threshold, m["figures"])
    result["run_id"] = run_id
    return result
