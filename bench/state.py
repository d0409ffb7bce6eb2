"""`python -m bench state --json`: what the fraud job's state costs per card, and per batch.

Fills a fresh transactions topic with one transaction for each of `--cards` cards and runs the
fraud job on it (a 1 s trigger) until every card is decided: the state then holds `--cards`
profiles. It reads the state's size from the last batch's progress (Spark's RocksDB metrics: rows,
SST files on disk) and from the checkpoint's `state` folder (blocks allocated), per card. Then it
sends `--rounds` rounds of `--touch` transactions of cards already known, one round per batch,
and reports the median batch: its duration and its `addBatch` (the stateful operator's share),
and the bytes it wrote into the checkpoint's state folder. A layout whose cost follows the cards a
batch touches keeps those flat as `--cards` grows; one that re-reads and rewrites whole buckets
does not.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import time
from pathlib import Path

from bench.common import scratch, create_topic, delete_topics, fraud_job, logger, own_broker
from controlplane.store import connect
from infra import kafka_client
from infra.config import load
from pipelines.supervisor.memory import dir_bytes

log = logger("state")


def send(s, topic: str, cards: list[int], prefix: str) -> None:
    """One valid transaction per card, keyed by card as the simulator keys them."""
    producer = kafka_client.producer(s, acks=1, linger_ms=50, batch_size=1 << 20)
    now = int(time.time() * 1000)
    for i, c in enumerate(cards):
        txn = {"txn_id": f"{prefix}-{i}", "card_id": f"card-{c:07d}", "merchant_id": f"m-{c % 500}",
               "amount_cents": 1_000 + c % 9_000, "currency": "EUR", "lat": 48.85 + (c % 100) / 1000,
               "lon": 2.35, "event_time": now, "produced_at": now}
        producer.send(topic, key=txn["card_id"].encode(), value=json.dumps(txn).encode())
    producer.flush()
    producer.close()


def written_since(folder: Path, since: float) -> int:
    """Bytes on disk of the files under `folder` modified at or after `since` (a time.time())."""
    total = 0
    for path in folder.rglob("*"):
        try:
            st = path.stat()
        except OSError:  # removed by Spark's maintenance meanwhile
            continue
        if path.is_file() and st.st_mtime >= since:
            total += st.st_blocks * 512
    return total


def wait(what: str, predicate, timeout: float, job: subprocess.Popen, work: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job.poll() is not None:
            raise SystemExit(f"bench state: the fraud job exited with {job.returncode}; see {work / 'fraud.log'}")
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise SystemExit(f"bench state: timed out after {timeout:.0f} s waiting for {what}")


class Progress:
    """What the store says of the fraud job: decisions, and its batches' progress rows."""

    def __init__(self, db):
        self.db = db
        self.columns = [c[0] for c in db.execute("SELECT * FROM batch_progress LIMIT 0").description]

    def decided(self) -> int:
        return self.db.execute("SELECT count(*) FROM decisions").fetchone()[0]

    def last_batch(self, rows: int) -> dict | None:
        """The newest batch with rows once the batches recorded have read `rows` (the
        listener records a batch just after its commit)."""
        read = self.db.execute("SELECT coalesce(sum(num_input_rows), 0) FROM batch_progress "
                               "WHERE query = 'fraud'").fetchone()[0]
        if read < rows:
            return None
        row = self.db.execute("SELECT * FROM batch_progress WHERE query = 'fraud' AND num_input_rows > 0 "
                              "ORDER BY batch_id DESC, ts DESC LIMIT 1").fetchone()
        return dict(zip(self.columns, row))


def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench state")
    p.add_argument("--cards", type=int, default=100_000, help="cards in the state (100,000)")
    p.add_argument("--touch", type=int, default=1_000, help="cards each measured batch touches (1,000)")
    p.add_argument("--rounds", type=int, default=5, help="measured batches (median over these)")
    p.add_argument("--timeout", type=float, default=900.0, help="give up on a phase after this many seconds")
    p.add_argument("--json", action="store_true", help="(the last line is always JSON)")
    args = p.parse_args(argv)
    if args.cards < 1 or not 1 <= args.touch <= args.cards or args.rounds < 1:
        p.error("--cards and --rounds must be positive and --touch between 1 and --cards")
    s = load()
    tag, work, topics, env = scratch(s, "state")
    env["TRIGGER_SECONDS"] = "1"
    state_dir = work / "checkpoints" / "fraud" / "decisions" / "state"
    with own_broker(s, log):
        try:
            create_topic(s, topics["TOPIC_TRANSACTIONS"], s.topics.partitions, append_time=True)
            send(s, topics["TOPIC_TRANSACTIONS"], list(range(args.cards)), "build")
            log(f"{args.cards:,} transactions of {args.cards:,} cards in the topic; starting the fraud job")
            progress = Progress(connect(env["CARDSTREAM_DB"]))
            with fraud_job(env, work, "--trigger-seconds", "1") as job:
                built = build(args, progress, job, work, state_dir)
                rounds = measure(args, s, topics["TOPIC_TRANSACTIONS"], progress, job, work, state_dir)
        finally:
            delete_topics(s, tag, log)
    return result(args, s, work, built, rounds)


def build(args, progress: Progress, job, work: Path, state_dir: Path) -> dict:
    """Every card decided once: the state's rows and bytes then, and how long it took."""
    started = time.monotonic()
    wait("the cards to be decided", lambda: progress.decided() >= args.cards, args.timeout, job, work)
    built_s = time.monotonic() - started
    row = wait("the last build batch's progress", lambda: progress.last_batch(args.cards), 120, job, work)
    built = {"state_rows": row["state_rows"], "state_disk_bytes": row["state_disk_bytes"],
             "checkpoint_state_bytes": dir_bytes(state_dir), "build_s": round(built_s, 1)}
    log(f"built in {built_s:.0f} s: {built['state_rows']:,} state rows, RocksDB SST "
        f"{built['state_disk_bytes'] / 1e6:.1f} MB, checkpoint state "
        f"{built['checkpoint_state_bytes'] / 1e6:.1f} MB")
    return built


def measure(args, s, topic: str, progress: Progress, job, work: Path, state_dir: Path) -> list[dict]:
    """--rounds batches of --touch known cards, one at a time: each one's progress and state bytes written."""
    rng = random.Random(7)
    rounds = []
    for r in range(args.rounds):
        time.sleep(2.0)  # past the last batch's files, to the second
        since, before = time.time(), progress.decided()
        send(s, topic, rng.sample(range(args.cards), args.touch), f"round{r}")
        wait(f"round {r + 1}", lambda: progress.decided() >= before + args.touch, args.timeout, job, work)
        row = wait(f"round {r + 1}'s progress", lambda: progress.last_batch(args.cards + (r + 1) * args.touch),
                   120, job, work)
        rounds.append({"rows": row["num_input_rows"], "duration_ms": row["duration_ms"],
                       "add_batch_ms": row["trigger_ms"], "commit_ms": row["commit_ms"],
                       "state_bytes_written": written_since(state_dir, since)})
        log(f"round {r + 1}: {rounds[-1]}")
    return rounds


def result(args, s, work: Path, built: dict, rounds: list[dict]) -> dict:
    """The JSON: the state's size per card and the median measured batch."""
    layout = json.loads((work / "checkpoints" / "fraud" / "decisions-layout.json").read_text()) \
        if (work / "checkpoints" / "fraud" / "decisions-layout.json").exists() else {"state": "bucket-json"}
    med = lambda k: round(statistics.median(x[k] for x in rounds))  # noqa: E731
    return {"cards": args.cards, "touch": args.touch, "rounds": args.rounds, "layout": layout.get("state", "bucket-json"),
            "buckets": s.fraud_state_buckets, **built,
            "state_bytes_per_card": round(built["state_disk_bytes"] / args.cards, 1),
            "checkpoint_bytes_per_card": round(built["checkpoint_state_bytes"] / args.cards, 1),
            "batch_ms": med("duration_ms"), "add_batch_ms": med("add_batch_ms"), "commit_ms": med("commit_ms"),
            "state_bytes_written_per_batch": med("state_bytes_written"), "batches": rounds}
