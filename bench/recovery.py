"""`python -m bench recovery --json`: from SIGKILL to the first committed batch of the query that
carries the job's promise, and to the moment that query has caught up again.

Runs the real stack at the demo's own settings (the Settings defaults, as `make demo` runs them:
trigger, usage trigger, restart delay, the live auditor on) on fresh topics and a scratch store:
broker, simulator, and the supervisor with the fraud and usage jobs; then crashes each job
`--rounds` times through the command table, as the dashboard's button does. Per crash:

- `fraud_s` / `usage_s`: the kill to the first committed batch with rows of the promise's query
  (PROMISE: the fraud job's decisions query, the usage job's exactly-once query);
- `*_caught_up_s`: the kill to that query's first committed batch whose lag at its commit (the
  records Kafka held at that moment beyond the batch's end offsets) is at most one batch: the
  median rows of its batches in the minute before the kill;
- `*_phases_s`: where the seconds to the supervisor's recovery went (the kill to the lease, to the
  first batch with rows of any of the job's queries, that batch: pipelines.supervisor.faults.phases).

Medians over the rounds, each round's figures beside them. `--model` has the fraud job serve a
learned version, as a fraud team would: the trainer's kind (gradient-boosted trees, its settings)
fitted on synthetic features in a child process and registered in the run's store before the
jobs start (what it decides does not matter here; what the job loads and plans with it does).
`--standby` runs each job with a warm
standby and crashes the active only once both standbys are ready and the previous crash's query
has caught up (one fault at a time). `--busy N` keeps N cores busy with a loop for the whole run
(the shared host the standards name); the JSON's `busy` holds the loops' CPU seconds. Goal: ≤ 10 s
each.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kafka import TopicPartition

from bench.common import busy_cores
from infra import broker, kafka_client
from infra.config import ROOT, load
from controlplane import commands
from controlplane.store import connect

# the query that carries each job's promise, and the topic it reads
PROMISE = {"fraud": "fraud", "usage": "usage-exactly-once"}
TOPIC = {"fraud": "TOPIC_TRANSACTIONS", "usage": "TOPIC_DECISIONS"}
STEADY_MS = 60_000  # the batches before the kill that say what one batch is


def log(message: str) -> None:
    print(f"bench recovery: {message}", file=sys.stderr, flush=True)


def wait_until(predicate, timeout: float):
    """The first truthy predicate() within `timeout` seconds, else None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    return None


def wait_for(what: str, predicate, timeout: float):
    """wait_until, or the bench ends saying what it waited for."""
    value = wait_until(predicate, timeout)
    if not value:
        raise SystemExit(f"bench recovery: timed out after {timeout:.0f} s waiting for {what}")
    return value


PHASES = ("to_lease_s", "to_batch_s", "batch_s")


def median_phases(rows: list[dict]) -> dict:
    """The median of each phase of the recoveries (pipelines.supervisor.faults.phases) that tell it."""
    out = {}
    for phase in PHASES:
        values = [r[phase] for r in rows if r.get(phase) is not None]
        out[phase] = round(statistics.median(values), 2) if values else None
    return out


def describe(rec: dict) -> str:
    return ", ".join(f"{p[:-2].replace('_', ' ')} " + (f"{rec[p]:.1f} s" if rec.get(p) is not None else "not told")
                     for p in PHASES)


def one_batch(batches: list[dict], killed_at: int) -> int | None:
    """What one batch is for a query: the median rows of its batches with rows in the minute
    before the kill (its steady state at this rate, trigger and load)."""
    rows = [b["num_input_rows"] for b in batches
            if killed_at - STEADY_MS <= b["ts"] < killed_at and b["num_input_rows"] > 0]
    return int(statistics.median(rows)) if rows else None


def first_committed(batches: list[dict], killed_at: int) -> dict | None:
    """The query's first batch with rows committed after the kill (batch_progress is written after
    the commit; `ts` is the batch's end)."""
    return next((b for b in batches if b["ts"] > killed_at and b["num_input_rows"] > 0), None)


def end_offsets(raw: str | None, topic: str) -> dict[int, int]:
    """{partition: offset} of `topic` in a batch_progress row's end_offsets (a JSON list of
    Spark's endOffset per source, each a JSON string)."""
    out = {}
    for source in json.loads(raw or "[]"):
        doc = json.loads(source) if isinstance(source, str) else source
        out.update({int(p): int(o) for p, o in ((doc or {}).get(topic) or {}).items()})
    return out


def lag_at(batch: dict, topic: str, head) -> int:
    """Records Kafka held when the batch committed beyond its end offsets; `head(ts)` gives
    {partition: the first offset appended after ts}."""
    ends = end_offsets(batch["end_offsets"], topic)
    return sum(max(0, off - ends.get(p, 0)) for p, off in head(batch["ts"]).items())


def caught_up(batches: list[dict], killed_at: int, topic: str, head, batch_rows: int) -> dict | None:
    """The query's first batch committed after the kill with at most one batch of lag."""
    return next((b for b in batches if b["ts"] > killed_at and lag_at(b, topic, head) <= batch_rows), None)


def kafka_head(consumer, topic: str):
    """head(ts) for `lag_at`: per partition the first offset whose record was appended after ts
    (the end offset when none was)."""
    parts = [TopicPartition(topic, p) for p in kafka_client.partitions(consumer, topic)]

    def head(ts: int) -> dict[int, int]:
        found = consumer.offsets_for_times({tp: ts + 1 for tp in parts})
        ends = consumer.end_offsets(parts)
        return {tp.partition: (found[tp].offset if found.get(tp) is not None else ends[tp]) for tp in parts}
    return head


def fit_model(store: str, rows: int = 3_000) -> int:
    """Fit the trainer's tree ensemble (train.candidates) on `rows` synthetic rows of the model's
    features, save it as train.save does (MLlib files and model.json under models/vN beside the
    store) and register it: its version. Run in a child process (its Spark JVM ends with it)."""
    import numpy as np
    import pandas as pd

    from bench.common import own_spark
    from pipelines.fraud import models, train

    db = connect(store)
    rng = np.random.default_rng(11)
    frame = pd.DataFrame({name: rng.random(rows) for name in models.MODEL_FEATURES})
    frame["label"] = ((frame[models.MODEL_FEATURES[0]] + rng.random(rows) * 0.5) > 1.1).astype(int)
    with own_spark("cardstream-bench-recovery-model", load()) as spark:
        kind, params, estimator = train.candidates()[-1]  # MLlib's estimators need the session
        t0 = time.monotonic()
        pipeline = train.fit(spark, estimator, frame, models.MODEL_FEATURES)
        fit_s = time.monotonic() - t0
        explain = models.tree_explain(models.MODEL_FEATURES)
        version, _ = models.save_version(db, models.models_dir(Path(store).parent), {
            "kind": kind, "params": json.dumps(params), "features": json.dumps(list(models.MODEL_FEATURES)),
            "train_from": "", "train_to": "", "as_of": "", "threshold": 0.5, "validation": "{}",
            "candidates": "[]", "train_rows": rows, "train_frauds": int(frame["label"].sum()),
            "fit_s": round(fit_s, 1), "created_at": int(time.time() * 1000), "explain": json.dumps(explain)},
            pipeline, models.MODEL_FEATURES, explain)
    return version


def demo_settings(s, rate: float, standby: bool) -> dict:
    """The settings the run had (the demo's own unless the environment changed them)."""
    return {"trigger_seconds": s.trigger_seconds, "usage_trigger_seconds": s.usage_trigger_seconds,
            "restart_delay_seconds": s.restart_delay_seconds, "audit_interval_seconds": s.audit_interval_seconds,
            "lease_ttl_seconds": s.lease_ttl_seconds, "fraud_mode": s.fraud_mode, "rate": rate,
            "standby": standby, "rehearsal": standby and s.standby_rehearsal, "auditor": "on",
            "model": None}  # the learned version the fraud job serves (--model), None: the rules


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench recovery")
    parser.add_argument("--rounds", type=int, default=3, help="crashes per job (median over these)")
    parser.add_argument("--rate", type=float, default=200, help="simulator rate, tx/s (the demo's SIMULATOR_RATE)")
    parser.add_argument("--standby", action="store_true",
                        help="run each job with a warm standby (the crash hands over to it)")
    parser.add_argument("--crash", default="fraud,usage", help="the jobs to crash, comma-separated (both run)")
    parser.add_argument("--catch-up-timeout", type=float, default=240,
                        help="seconds to wait for a crashed job's query to catch up")
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="keep N cores busy with a loop for the whole run (a shared host)")
    parser.add_argument("--model", action="store_true",
                        help="the fraud job serves a learned version (the trainer's trees, fitted on synthetic rows)")
    parser.add_argument("--json", action="store_true", help="(the last line is always JSON)")
    args = parser.parse_args(argv)
    crashed = [j.strip() for j in args.crash.split(",") if j.strip()]
    if not crashed or set(crashed) - {"fraud", "usage"}:
        parser.error("--crash takes fraud, usage or both")
    if args.busy < 0:
        parser.error("--busy takes a number of cores, 0 or more")
    with busy_cores(args.busy, log) as busy:
        result = _run(args, crashed)
    result["busy"] = busy  # the loops' CPU seconds: the load was there
    return result


def _run(args, crashed: list[str]) -> dict:
    s = load()
    started_broker = not s.external_bootstrap and not broker.broker_pids(s)
    broker.up(s, quiet=True)
    work = Path(tempfile.mkdtemp(prefix="bench-recovery-", dir=s.run_dir))
    tag = uuid.uuid4().hex[:8]
    # the demo's own trigger, restart delay and auditor: only the store, checkpoints and topics differ
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CARDSTREAM_DB": str(work / "cardstream.db"),
           "CHECKPOINT_ROOT": str(work / "checkpoints"),
           "TOPIC_TRANSACTIONS": f"bench-tx-{tag}", "TOPIC_LABELS": f"bench-labels-{tag}",
           "TOPIC_DECISIONS": f"bench-decisions-{tag}", "TOPIC_DLQ": f"bench-dlq-{tag}",
           "TOPIC_MARKERS": f"bench-markers-{tag}", "TOPIC_DECISIONS_RT": f"bench-decisions-rt-{tag}"}
    db = connect(env["CARDSTREAM_DB"])
    settings = demo_settings(load(env), args.rate, args.standby)
    if args.model:
        t0 = time.monotonic()
        fitted = subprocess.run([sys.executable, "-c", "import sys; from bench.recovery import fit_model; "
                                 "print(fit_model(sys.argv[1]))", env["CARDSTREAM_DB"]],
                                env=env, cwd=ROOT, capture_output=True, text=True)
        if fitted.returncode != 0:
            if started_broker:  # nothing else of the run is up yet
                broker.down(s, quiet=True)
            raise SystemExit(f"bench recovery: fitting the model failed:\n{fitted.stderr[-3000:]}")
        settings["model"] = int(fitted.stdout.strip().splitlines()[-1])
        log(f"model {settings['model']} (the trainer's trees on synthetic rows) registered in "
            f"{time.monotonic() - t0:.0f} s: the fraud job serves it")
    log(f"starting the supervisor (fraud, usage, simulator at {args.rate:.0f} tx/s; {settings}); logs in {work}")
    with open(work / "supervisor.log", "ab") as out:
        sup = subprocess.Popen([sys.executable, "-m", "pipelines.supervisor", "--jobs", "fraud,usage",
                                "--with-simulator", "--simulator-args", f"--rate {args.rate}",
                                *(["--standby"] if args.standby else [])],
                               env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    consumer = kafka_client.consumer(s, isolation_level="read_committed")
    runs: dict[str, list[dict]] = {job: [] for job in crashed}

    def batches(job: str) -> list[dict]:
        return list(db.query("SELECT ts, num_input_rows, end_offsets FROM batch_progress WHERE query = ? "
                             "ORDER BY ts", [PROMISE[job]]))
    try:
        for job in ("fraud", "usage"):
            wait_for(f"{job}'s first batch", lambda job=job: first_committed(batches(job), 0), timeout=900)
        heads = {job: kafka_head(consumer, env[TOPIC[job]]) for job in crashed}
        for round_ in range(1, args.rounds + 1):
            for job in crashed:
                if args.standby:  # crash only once the standbys' sessions are up, as a user would see them:
                    # one fault at a time, not while the other job's new standby starts and rehearses
                    for other in ("fraud", "usage"):
                        wait_for(f"{other}'s standby", lambda other=other: db.execute(
                            "SELECT status FROM job_status WHERE job = ?", [f"{other}-standby"]).fetchone()
                            == ("ready",), 600)
                before = db["recoveries"].count_where("job = ?", [job])
                command_id = commands.issue(db, "crash", job)
                wait_for(f"the crash of {job}", lambda: db["commands"].get(command_id)["status"] != "pending", 30)
                wait_for(f"{job} to recover", lambda: db["recoveries"].count_where("job = ?", [job]) > before, 600)
                (rec,) = db["recoveries"].rows_where("job = ? AND command_id = ?", [job, command_id], limit=1)
                killed = rec["killed_at"]
                size = one_batch(batches(job), killed)
                first = wait_for(f"{PROMISE[job]}'s first batch after the kill",
                                 lambda: first_committed(batches(job), killed), 600)
                done = wait_until(lambda: caught_up(batches(job), killed, env[TOPIC[job]], heads[job], size or 0),
                                  args.catch_up_timeout)
                run = {"s": (first["ts"] - killed) / 1000, "caught_up_s": (done["ts"] - killed) / 1000 if done else None,
                       "one_batch_rows": size, "via": rec["via"], **{p: rec[p] for p in PHASES}}
                runs[job].append(run)
                caught = (f"{run['caught_up_s']:.1f} s" if done else
                          f"not within {args.catch_up_timeout:.0f} s (the job is slower than its input here)")
                log(f"round {round_}: {job} ({rec['via']}): {PROMISE[job]}'s first batch {run['s']:.1f} s, caught "
                    f"up (lag <= {size} records) {caught}; the supervisor's recovery "
                    f"{rec['seconds']:.1f} s ({describe(rec)})")
        result = {}
        for job in crashed:
            rows = runs[job]
            result[f"{job}_s"] = round(statistics.median(r["s"] for r in rows), 2)
            result[f"{job}_runs"] = [round(r["s"], 2) for r in rows]
            caught = [r["caught_up_s"] for r in rows if r["caught_up_s"] is not None]
            # None: in no round did the query catch up within --catch-up-timeout
            result[f"{job}_caught_up_s"] = round(statistics.median(caught), 2) if caught else None
            result[f"{job}_caught_up_runs"] = [None if r["caught_up_s"] is None else round(r["caught_up_s"], 2)
                                               for r in rows]
            result[f"{job}_one_batch_rows"] = [r["one_batch_rows"] for r in rows]
            result[f"{job}_via"] = [r["via"] for r in rows]
            result[f"{job}_phases_s"] = median_phases(rows)
        result["goal_s"] = 10
        result["standby"] = args.standby
        result["rehearsal"] = settings["rehearsal"]
        result["settings"] = settings
        result["promise_queries"] = {job: PROMISE[job] for job in crashed}
        return result
    finally:
        consumer.close()
        sup.send_signal(signal.SIGTERM)
        try:
            sup.wait(timeout=60)
        except subprocess.TimeoutExpired:
            sup.kill()
        if started_broker:
            broker.down(s, quiet=True)
