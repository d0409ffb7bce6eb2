"""End-to-end decision latency of the fraud job: `python -m bench latency --mode M --rate R --seconds S --json`.

Starts the broker if it is not running (and stops it afterwards if it started it), creates fresh
topics (stamped with the broker's LogAppendTime, infra/topics.py), starts `python -m pipelines.fraud
--mode M` on its own checkpoint and store, feeds it with `python -m simulator --rate R` for a
warm-up and then S measured seconds, and reads back, read_committed, the transactions and the
mode's output topic (micro-batch: `decisions`, exactly once; real-time: `decisions-rt`).

Latency of a transaction = its decision's append time on the output topic - its own append time
on the transactions topic: one clock (the broker's), and everything after the transaction reached
Kafka counted (the job's queueing, batching, scoring and its Kafka transaction's commit).
How far the simulator itself fell behind its schedule is reported apart (`behind_schedule_p99_ms`).
Every valid transaction the simulator sent must be decided: after the drain (`--drain-seconds`)
the ones still undecided are counted (`undecided`) and the bench fails, its JSON printed first.
A transaction decided twice is counted (`duplicates`); on the exactly-once `decisions` topic
that is a failure too. Last line: {"mode", "rate", "achieved_rate", "p50_ms", "p95_ms", "p99_ms",
"max_ms", "undecided", "duplicates", "precision", "recall", "stages_ms" | "profile_age_p99_ms", ...}, `stages_ms` (micro-batch)
the median of each part of a stateful batch (pipelines.engine.stages) over the measured batches,
`profile_age_p99_ms` (real-time) the p99 of the decisions' `profile_age_ms`, and who decided: `model_decisions`
/ `rules_decisions`, `model_p99_ms` (the model's own decisions' p99) and `model_why` (the rules'
decisions per reason; `--model` serves a trained version, and priming then waits for the stateful
companion's terminal table, so the model can decide from the first measured payment); precision and recall are of the
simulator's own traffic (a consistency check: its patterns are shaped for the analyzers; the
honest measurement is `python -m bench quality`). Progress goes to stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from controlplane.clock import now_ms
from controlplane.store import connect
from infra import broker, kafka_client
from infra.config import ROOT, load
from infra.topics import ensure_topics
from pipelines.engine.stages import STAGES, batch_breakdowns
from pipelines.fraud.realtime import why_kind

LOG_APPEND_TIME = 1  # a Kafka record's timestamp type: stamped by the broker
LATENCY_COLUMNS = ("mode", "rate", "achieved_rate", "p50_ms", "p95_ms", "p99_ms", "max_ms", "measured",
                   "undecided", "duplicates", "behind_schedule_p99_ms", "precision", "recall")


def log(msg: str) -> None:
    print(f"bench latency: {msg}", file=sys.stderr, flush=True)


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, min(len(sorted_values), int(-(-q * len(sorted_values) // 100))))
    return float(sorted_values[rank - 1])


def latency_figures(tx_appended: dict[str, int], decisions: list[tuple[str, int]], expected: set[str],
                    since_ms: int) -> dict:
    """Latency = decision append time - transaction append time, both the broker's LogAppendTime.

    `tx_appended` is {txn_id: append ms} of the transactions topic, `decisions` the output topic's
    (txn_id, append ms) in topic order, `expected` the valid txn_ids the simulator sent. Measured:
    the expected transactions appended at or after `since_ms` (after the warm-up). A transaction
    decided twice is counted in `duplicates` and measured by its first decision (the one a
    read_committed reader acts on); an expected one never decided is counted in `undecided`.
    """
    first: dict[str, int] = {}
    duplicates = 0
    for txn_id, ms in decisions:
        if txn_id in first:
            duplicates += 1
            first[txn_id] = min(first[txn_id], ms)
        else:
            first[txn_id] = ms
    undecided = sorted(expected - set(first))
    lat = sorted(first[t] - tx_appended[t] for t in expected
                 if t in first and t in tx_appended and tx_appended[t] >= since_ms)
    return {"measured": len(lat), "p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95),
            "p99_ms": percentile(lat, 99), "max_ms": lat[-1] if lat else None,
            "undecided": len(undecided), "undecided_ids": undecided[:5], "duplicates": duplicates}


def behind_schedule(tx_appended: dict[str, int], on_time_event_ms: dict[str, int]) -> float | None:
    """p99 of how far the simulator's sends fell behind its schedule, in ms.

    A paced simulator sends an on-time payment when the wall clock reaches its event time, so
    append - event_time is the fixed offset of its clock's anchor (its smallest value) plus how
    late the send was; the offset is taken off.
    """
    gaps = sorted(tx_appended[t] - e for t, e in on_time_event_ms.items() if t in tx_appended)
    if not gaps:
        return None
    return percentile([g - gaps[0] for g in gaps], 99)


def quality(decisions: list[dict], labels: list[dict]) -> dict:
    """Precision and recall of is_fraud against the simulator's labels (valid transactions only)."""
    truth = {l["txn_id"]: bool(l["is_fraud"]) for l in labels if not str(l.get("pattern", "")).startswith("bad:")}
    said = {}
    for d in decisions:
        said[d["txn_id"]] = said.get(d["txn_id"], False) or bool(d["is_fraud"])
    both = [t for t in said if t in truth]
    tp = sum(1 for t in both if said[t] and truth[t])
    fp = sum(1 for t in both if said[t] and not truth[t])
    fn = sum(1 for t in both if not said[t] and truth[t])
    return {"labelled": len(both), "frauds": tp + fn,
            "precision": round(tp / (tp + fp), 4) if tp + fp else None,
            "recall": round(tp / (tp + fn), 4) if tp + fn else None}


def first_measured(records: list[tuple[dict, int]], tx_appended: dict[str, int], expected: set[str],
                   since_ms: int):
    """(decision, its append time) of each measured transaction's first decision, in topic order."""
    seen = set()
    for d, appended_at in records:
        t = str(d.get("txn_id"))
        if t in seen or t not in expected or tx_appended.get(t, -1) < since_ms:
            continue
        seen.add(t)
        yield d, appended_at


def by_model(records: list[tuple[dict, int]], tx_appended: dict[str, int], expected: set[str],
             since_ms: int) -> dict:
    """Who made the measured real-time decisions and how fast each was: `model_decisions` and
    `rules_decisions` (model_version > 0 or 0), their latencies apart (`model_p50_ms`,
    `model_p99_ms`, `rules_p99_ms`: append to append, as the overall figure) and `model_why`, the
    rules' decisions per reason (its sentence with per-payment details as "…"; "no model in use"
    when the rules decided without one, none given)."""
    model, rules, why = [], [], {}
    for d, appended_at in first_measured(records, tx_appended, expected, since_ms):
        ms = appended_at - tx_appended[str(d["txn_id"])]
        if (d.get("model_version") or 0) > 0:
            model.append(ms)
            continue
        rules.append(ms)
        kind = why_kind(d["model_why"]) if d.get("model_why") else "no model in use"
        why[kind] = why.get(kind, 0) + 1
    model.sort()
    rules.sort()
    return {"model_decisions": len(model), "rules_decisions": len(rules),
            "model_p50_ms": percentile(model, 50), "model_p99_ms": percentile(model, 99),
            "rules_p99_ms": percentile(rules, 99),
            "model_why": dict(sorted(why.items(), key=lambda kv: -kv[1]))}


def realtime_figures(records: list[tuple[dict, int]], tx_appended: dict[str, int], expected: set[str],
                     since_ms: int) -> dict:
    """Over the measured transactions' first real-time decisions: `profile_age_p99_ms`, the p99 of
    their `profile_age_ms` (the age of the newest history the card's profile had folded: its
    previous transaction, or the seed's cut; never younger than a hole), `profile_age_unknown`, the
    decisions without one (a transaction off its card's key partition), and `split_ms`, where a decision's time goes, p50 / p99: `read_and_score` =
    decided_at (the JVM's clock in the scoring projection) - the transaction's append time; `write`
    = the decision's append time - decided_at. One machine, so the two clocks are one."""
    ages, read, write, versions, unknown = [], [], [], {}, 0
    for d, appended_at in first_measured(records, tx_appended, expected, since_ms):
        versions[str(d.get("model_version"))] = versions.get(str(d.get("model_version")), 0) + 1
        if isinstance(d.get("profile_age_ms"), int):
            ages.append(d["profile_age_ms"])
        else:
            unknown += 1
        if isinstance(d.get("decided_at"), int):
            read.append(d["decided_at"] - tx_appended[str(d["txn_id"])])
            write.append(appended_at - d["decided_at"])
    ages.sort()
    read.sort()
    write.sort()
    return {"profile_age_p99_ms": percentile(ages, 99), "profile_age_unknown": unknown, "decided_by_model": versions,
            **by_model(records, tx_appended, expected, since_ms),
            "split_ms": {"read_and_score_p50": percentile(read, 50), "read_and_score_p99": percentile(read, 99),
                         "write_p50": percentile(write, 50), "write_p99": percentile(write, 99)}}


def drained(s, topic: str, expected: set, deadline: float, what: str) -> list[tuple[dict, int, int]]:
    """The decisions on `topic` (the bench's priming ones left out), read again every 3 s until
    every expected transaction is among them or `deadline` (monotonic) passes."""
    while True:
        records = [(v, ts, kind) for v, ts, kind in read_records(s, topic)
                   if v is not None and not str(v.get("txn_id", "")).startswith("prime-")]
        missing = len(expected - {str(v.get("txn_id")) for v, _, _ in records})
        if not missing or time.monotonic() >= deadline:
            return records
        log(f"{len(expected) - missing} of {len(expected)} {what}; waiting")
        time.sleep(3)


def companion_figures(s, topic: str, tx_appended: dict, expected: set, since_ms: int,
                      deadline: float) -> dict:
    """In real-time mode, the stateful companion's authoritative decisions on `topic`: how many of
    the expected it decided (waiting for it until `deadline`) and its latency, so a companion that
    falls behind shows in the figures instead of passing unseen."""
    records = [(str(v.get("txn_id")), ts)
               for v, ts, _ in drained(s, topic, expected, deadline, "decided by the stateful companion")]
    figures = latency_figures(tx_appended, records, expected, since_ms)
    return {"companion_undecided": figures["undecided"], "companion_p50_ms": figures["p50_ms"],
            "companion_p99_ms": figures["p99_ms"], "companion_duplicates": figures["duplicates"]}


def read_records(s, topic: str, idle_ms: int = 3_000) -> list[tuple[dict | None, int, int]]:
    """(value as JSON or None, Kafka timestamp, timestamp type) of every committed record of
    `topic`, in topic order per partition (a transactional writer's aborted ones are never read)."""
    consumer = kafka_client.consumer(s, topic, auto_offset_reset="earliest", consumer_timeout_ms=idle_ms,
                                     max_poll_records=5_000, isolation_level="read_committed")
    out = []
    try:
        for m in consumer:
            try:
                value = json.loads(m.value)
            except (ValueError, RecursionError):
                value = None
            out.append((value if isinstance(value, dict) else None, m.timestamp, m.timestamp_type))
        return out
    finally:
        consumer.close()


def read_topic(s, topic: str, idle_ms: int = 3_000) -> list[dict]:
    """Every committed JSON object of `topic`."""
    return [v for v, _, _ in read_records(s, topic, idle_ms) if v is not None]


def appended(records, topic: str) -> dict[str, int]:
    """{txn_id: LogAppendTime} of a topic's records; SystemExit if the broker did not stamp them."""
    out: dict[str, int] = {}
    for value, ts, ts_type in records:
        if value is None or "txn_id" not in value:
            continue
        if ts_type != LOG_APPEND_TIME:
            raise SystemExit(f"bench latency: topic {topic} is not stamped with the broker's append time "
                             f"(message.timestamp.type=LogAppendTime, set by infra/topics.py); its "
                             f"latencies would mix the producers' clocks.")
        out.setdefault(str(value["txn_id"]), ts)
    return out


def stage_medians(store_path: Path, since_ms: int) -> dict:
    """Median of each stage (pipelines.engine.stages) over the fraud batches with rows committed in
    the measured window: where a stateful batch's time goes, beside the latency it makes."""
    db = connect(store_path)
    try:
        split = [b for b in batch_breakdowns(db, limit=100_000) if b["ts"] >= since_ms]
    finally:
        db.conn.close()
    if not split:
        return {}
    return {"batches": len(split), "duration_ms": round(statistics.median(b["duration_ms"] for b in split)),
            **{col: round(statistics.median(b[col] for b in split)) for col, _ in STAGES}}


def record(s, result: dict) -> None:
    """Keep the run's figures in the store (`latency_runs`), where the dashboard shows them as measured."""
    db = connect(s=s)
    try:
        db["latency_runs"].insert({"ts": now_ms(), **{k: result.get(k) for k in LATENCY_COLUMNS}})
    finally:
        db.conn.close()


def prime(s, tx: str, dec: str, deadline: float, ready=None) -> None:
    """Send a few transactions until one comes back decided (and `ready`, a (test, what it waits
    for), says yes): the job's first, slow batches (Python workers, state store, real-time tasks)
    are then behind us."""
    producer = kafka_client.producer(s, acks="all")
    i = 0
    try:
        while time.monotonic() < deadline:
            now = int(time.time() * 1000)
            txn = {"txn_id": f"prime-{i}", "card_id": f"prime-{i}", "merchant_id": "prime",
                   "amount_cents": 1_000, "currency": "EUR", "lat": 0.0, "lon": 0.0, "event_time": now,
                   "produced_at": now}
            producer.send(tx, key=txn["card_id"].encode(), value=json.dumps(txn).encode())
            producer.flush()
            i += 1
            if read_topic(s, dec, 1_000) and (ready is None or ready[0]()):
                return
            time.sleep(1)
        raise SystemExit("bench latency: the fraud job decided nothing within the priming time." if ready is None
                         else f"bench latency: within the priming time, the fraud job did not decide or {ready[1]}.")
    finally:
        producer.close()


def _stop(proc: subprocess.Popen, grace_s: float = 30) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench latency")
    p.add_argument("--mode", choices=("microbatch", "realtime"), default="microbatch")
    p.add_argument("--rate", type=float, default=1_000.0)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--warmup", type=float, default=20.0, help="seconds fed before measuring")
    p.add_argument("--trigger-seconds", type=float, default=0.0,
                   help="micro-batch trigger (0: next batch as soon as the last one ends)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--drain-seconds", type=float, default=120.0,
                   help="how long the job may take, after the simulator stops, to decide the rest")
    p.add_argument("--simulator-linger-ms", type=int, default=0,
                   help="the simulator producer's linger (latency is counted from the broker's append, "
                        "so this only changes how many requests the broker serves)")
    p.add_argument("--keep", action="store_true",
                   help="keep the run's folder (the job's log, store and checkpoint) to look into")
    p.add_argument("--model", default=None, metavar="STORE[:VERSION]",
                   help="serve this trained version (a store's `models` row and its folder, exported for the "
                        "JVM: python -m pipelines.fraud.models export): registered in the run's store, so the "
                        "job decides with it from its start")
    p.add_argument("--json", action="store_true", help="(the result is always printed as JSON)")
    args = p.parse_args(argv)
    if args.rate <= 0 or args.seconds <= 0 or args.warmup < 0:
        p.error("--rate and --seconds must be positive and --warmup zero or more")
    return args


@dataclass
class Run:
    """One run's fresh topics and folder; `out` is where its mode's decisions land (micro-batch:
    `decisions`, exactly once; real-time: `decisions-rt`)."""
    mode: str
    work: Path
    tx: str
    labels: str
    dec: str
    dlq: str
    marks: str
    rt: str

    @classmethod
    def fresh(cls, s, mode: str) -> "Run":
        tag = uuid.uuid4().hex[:8]
        run = cls(mode, s.run_dir / f"bench-latency-{tag}",
                  *(f"bench-{name}-{tag}" for name in ("tx", "labels", "dec", "dlq", "marks", "rt")))
        run.work.mkdir(parents=True)
        ensure_topics([run.tx, run.labels, run.dec, run.dlq, run.marks, run.rt], s=s)
        return run

    @property
    def out(self) -> str:
        return self.rt if self.mode == "realtime" else self.dec

    @property
    def log_path(self) -> Path:
        return self.work / "job.log"


def install_model(spec: str, store: Path) -> dict:
    """Register the version `spec` names (STORE[:VERSION], default the newest) in `store`: the job
    loads the newest version at its start. Its {version, kind} there."""
    from pipelines.fraud import models

    source, _, version = spec.partition(":")
    src = connect(Path(source))
    try:
        row = models.newest(src) if not version else next(
            iter(src.query("SELECT * FROM models WHERE version = ?", [int(version)])), None)
    finally:
        src.conn.close()
    if row is None:
        raise SystemExit(f"bench latency: no model {version or ''} in {source}")
    if not (Path(row["path"]) / models.MODEL_JSON).exists():
        raise SystemExit(f"bench latency: model {row['version']} of {source} has no {models.MODEL_JSON}; run "
                         f"`python -m pipelines.fraud.models export --store {source} --version {row['version']}`")
    db = connect(store)
    try:
        return {"version": models.register(db, {k: v for k, v in dict(row).items() if k != "version"}),
                "kind": row["kind"]}
    finally:
        db.conn.close()


def served(args, run: Run):
    """With a model in real-time mode, what priming also waits for: the stateful companion's first
    applied batch, after which it publishes the terminal table the model's terminal features come
    from (pipelines.fraud.realtime.TerminalTable; the JVM reloads it within a second), so the
    measured decisions are the model's, not the rules' for want of a table. None otherwise."""
    from pipelines.fraud.realtime import TERMINALS_FILE

    if not args.model or args.mode != "realtime":
        return None
    table = run.work / "checkpoint" / TERMINALS_FILE
    return table.exists, f"its stateful companion did not publish its terminal table ({table})"


def start_job(args, run: Run, env: dict) -> subprocess.Popen:
    """`python -m pipelines.fraud --mode M` on the run's topics, checkpoint and store, once it says
    it runs (its log's "mode, epoch" line)."""
    job = subprocess.Popen(
        [sys.executable, "-m", "pipelines.fraud", "--mode", args.mode, "--transactions-topic", run.tx,
         "--decisions-topic", run.dec, "--dlq-topic", run.dlq, "--markers-topic", run.marks,
         "--realtime-topic", run.rt, "--checkpoint", str(run.work / "checkpoint"),
         "--store", str(run.work / "store.db"), "--trigger-seconds", str(args.trigger_seconds),
         "--starting-offsets", "earliest"],
        cwd=ROOT, env=env, stdout=open(run.log_path, "w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 420  # a session's start takes minutes on a loaded two-core machine
    while "mode, epoch" not in run.log_path.read_text():
        if job.poll() is not None or time.monotonic() > deadline:
            _stop(job)
            raise SystemExit(f"bench latency: the fraud job did not start; see {run.log_path}")
        time.sleep(0.5)
    return job


def feed(args, run: Run, env: dict) -> tuple[dict, float, float]:
    """The simulator at `--rate` for the warm-up and the measured seconds: (its totals, the wall
    time it started and ended)."""
    total = int(args.rate * (args.warmup + args.seconds))
    started = time.time()
    sim = subprocess.Popen(
        [sys.executable, "-m", "simulator", "--rate", str(args.rate), "--count", str(total),
         "--seed", str(args.seed), "--topic", run.tx, "--labels-topic", run.labels, "--no-control",
         "--linger-ms", str(args.simulator_linger_ms), "--progress-seconds", "0"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = sim.communicate(timeout=args.warmup + args.seconds + 300)
    finally:
        if sim.poll() is None:
            sim.kill()
    if sim.returncode != 0:
        raise SystemExit(f"bench latency: the simulator failed: {err.strip()[-300:]}")
    totals = json.loads(out.strip().splitlines()[-1])
    log(f"simulator done: {totals}")
    return totals, started, time.time()


def on_time_events(tx_records, valid_labels: list[dict]) -> dict[str, int]:
    """{txn_id: event_time} of the valid transactions the simulator sent on time (not late)."""
    events = {str(v.get("txn_id")): v.get("event_time") for v, _, _ in tx_records if v}
    return {str(l["txn_id"]): events[str(l["txn_id"])] for l in valid_labels
            if not l.get("is_late") and isinstance(events.get(str(l["txn_id"])), int)}


def measure(s, args, run: Run, totals: dict, started: float, ended: float) -> tuple[dict, dict]:
    """Reads the run back (every valid transaction decided, or the drain's deadline) and computes
    its figures: (the result, the latency figures with the undecided ids)."""
    since_ms = int((started + args.warmup) * 1000)
    label_rows = read_topic(s, run.labels, 2_000)
    valid = [l for l in label_rows if not str(l.get("pattern", "")).startswith("bad:")]
    expected = {str(l["txn_id"]) for l in valid}
    drain_deadline = time.monotonic() + args.drain_seconds
    out_records = drained(s, run.out, expected, drain_deadline, "decided")
    tx_records = read_records(s, run.tx)
    tx_appended = appended(tx_records, run.tx)
    out_appended = appended(out_records, run.out)  # checks the stamp type
    figures = latency_figures(tx_appended, [(str(v["txn_id"]), ts) for v, ts, _ in out_records], expected, since_ms)
    sent = int(totals.get("sent", args.rate * (args.warmup + args.seconds)))
    result = {"mode": args.mode, "rate": args.rate,
              "achieved_rate": round(float(totals.get("achieved_rate") or sent / max(1e-9, ended - started)), 1),
              **{k: figures[k] for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms", "undecided", "duplicates")},
              "measured": figures["measured"], "decided": len(out_appended.keys() & expected),
              "expected": len(expected),
              "behind_schedule_p99_ms": behind_schedule(tx_appended, on_time_events(tx_records, valid)),
              "output_topic": "decisions-rt" if args.mode == "realtime" else "decisions",
              **quality([v for v, _, _ in out_records], label_rows)}
    if args.mode == "microbatch":
        result["stages_ms"] = stage_medians(run.work / "store.db", since_ms)
    else:
        result.update(realtime_figures([(v, ts) for v, ts, _ in out_records], tx_appended, expected, since_ms))
        result.update(companion_figures(s, run.dec, tx_appended, expected, since_ms, drain_deadline))
    return result, figures


def failure(args, run: Run, result: dict, figures: dict) -> str | None:
    """Why the run failed (a transaction undecided, or decided twice on an exactly-once topic), in
    one sentence; None when it did not."""
    kept = f"the job's log is kept at {run.log_path}"
    if figures["undecided"]:
        return (f"bench latency: {figures['undecided']} of {result['expected']} transactions were still "
                f"undecided {args.drain_seconds:g} s after the simulator stopped (for instance "
                f"{', '.join(figures['undecided_ids'])}); {kept}.")
    if result.get("companion_undecided"):
        return (f"bench latency: the stateful companion left {result['companion_undecided']} of "
                f"{result['expected']} transactions undecided on {run.dec} {args.drain_seconds:g} s after the "
                f"simulator stopped: it did not keep up; {kept}.")
    if result.get("companion_duplicates"):
        return (f"bench latency: the stateful companion decided {result['companion_duplicates']} "
                f"transactions more than once on the exactly-once topic {run.dec} (read_committed); {kept}.")
    if figures["duplicates"] and args.mode == "microbatch":
        return (f"bench latency: {figures['duplicates']} transactions were decided more than once on the "
                f"exactly-once decisions topic (read_committed); {kept}.")
    return None


def main(argv: list[str]) -> dict:
    args = parse_args(argv)
    s = load()
    started_broker = not s.external_bootstrap and not broker.broker_pids(s)
    broker.up(s, quiet=True)
    run = Run.fresh(s, args.mode)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    job, clean = None, False
    try:
        model = install_model(args.model, run.work / "store.db") if args.model else {"version": 0, "kind": "rules"}
        job = start_job(args, run, env)
        prime(s, run.tx, run.out, time.monotonic() + 600, served(args, run))
        log(f"job up ({args.mode}); feeding {args.rate:g} tx/s for {args.warmup:g} s warm-up + "
            f"{args.seconds:g} s measured")
        totals, started, ended = feed(args, run, env)
        result, figures = measure(s, args, run, totals, started, ended)
        result["model"] = model
        why = failure(args, run, result, figures)
        clean = why is None and not args.keep  # removed once the job has stopped (it writes until then)
        if why is None and args.keep:
            log(f"the run's folder is kept at {run.work}")
        record(s, result)
        if why:
            print(json.dumps(result), flush=True)  # the figures stay the last stdout line
            raise SystemExit(why)
        return result
    finally:
        if job is not None:
            _stop(job)
        if clean:
            shutil.rmtree(run.work, ignore_errors=True)
        if started_broker:
            broker.down(s, quiet=True)
