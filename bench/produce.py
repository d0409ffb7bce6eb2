"""How fast the simulator feeds Kafka: `python -m bench produce --json [--count N] [--rate R]`.

Starts the broker if it is not running (and stops it again afterwards if it started it), runs the
simulator in this process on two fresh topics (transactions and labels), and prints as the last
line {"target_rate", "achieved_rate", "p50_send_ms", "p99_send_ms", ...}. `achieved_rate` counts
transactions acknowledged by the broker (each also has its label acknowledged) per second, from
the first send to the last acknowledgement; `pXX_send_ms` is the time from a transaction's
`produced_at` stamp to its append on the broker (the topic's LogAppendTime, read back from the
topic: one machine, one clock, as a user would measure it). `cpu_us_per_tx` is the process's CPU time
per transaction, which other work on a shared machine does not inflate. `--public` uses
kafka-python's per-record send() instead of the bulk path, for comparison. The topics are deleted
at the end (`--keep-topics` keeps them).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

import numpy as np

from bench.common import append_stamped
from infra import broker, kafka_client
from infra.config import load
from infra.topics import ensure_topics
from simulator.producer import Producer
from simulator.runner import Simulator
from simulator.stream import Stream

STAMP = b'"produced_at":'


def log(msg: str) -> None:
    print(f"bench produce: {msg}", file=sys.stderr, flush=True)


def percentile(values: list[int], q: float) -> float | None:
    """Nearest-rank percentile (None when empty)."""
    return float(np.percentile(np.asarray(values), q, method="inverted_cdf")) if values else None


def produced_at(value: bytes | None) -> int | None:
    """The `produced_at` stamp of a transaction's JSON (the simulator writes it last), without
    parsing the rest; None for a payload without one."""
    at = value.rfind(STAMP) if value else -1
    if at < 0:
        return None
    digits = value[at + len(STAMP):].split(b"}", 1)[0].strip()
    return int(digits) if digits.isdigit() else None


def append_delays(s, topic: str, expected: int, idle_ms: int = 3_000) -> list[int]:
    """Per transaction of `topic`: its append time (the broker's LogAppendTime) - its `produced_at`
    stamp, in ms; SystemExit if the broker did not stamp the records."""
    out = []
    for m in append_stamped(s, topic, _not_append_time, idle_ms, max_poll_records=10_000,
                            fetch_max_bytes=64 * 1024 * 1024):
        stamp = produced_at(m.value)
        if stamp is not None:
            out.append(m.timestamp - stamp)
        if len(out) >= expected:
            break
    return out


def _not_append_time(topic: str) -> SystemExit:
    return SystemExit(f"bench produce: topic {topic} is not stamped with the broker's append time "
                      f"(message.timestamp.type=LogAppendTime, set by infra/topics.py).")


def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench produce")
    p.add_argument("--count", type=int, default=300_000)
    p.add_argument("--rate", type=float, default=None, help="target tx/s; omitted: as fast as possible")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fraud-rate", type=float, default=0.02)
    p.add_argument("--late-rate", type=float, default=0.01)
    p.add_argument("--public", action="store_true", help="kafka-python's per-record send() path")
    p.add_argument("--keep-topics", action="store_true")
    p.add_argument("--json", action="store_true", help="(the result is always printed as JSON)")
    args = p.parse_args(argv)
    if args.count < 1 or (args.rate is not None and args.rate <= 0):
        p.error("--count and --rate must be positive")

    s = load()
    started_broker = not s.external_bootstrap and not broker.broker_pids(s)
    bootstrap = broker.up(s, quiet=True)
    run = uuid.uuid4().hex[:8]
    topic, labels = f"bench-produce-{run}", f"bench-produce-{run}-labels"
    ensure_topics([topic, labels], s=s)
    log(f"{args.count:,} transactions to {topic} on {bootstrap} "
        f"({'as fast as possible' if args.rate is None else f'{args.rate:g}/s'}, "
        f"{'per-record send()' if args.public else 'bulk appends'})")
    try:
        stream = Stream(args.seed, args.rate or 1000.0, fraud_rate=args.fraud_rate, late_rate=args.late_rate,
                        late_lag_ms=s.watermark_seconds * 1000, start_ms=int(time.time() * 1000),
                        count=args.count)
        producer = Producer(bootstrap, bulk=False if args.public else None)
        cpu0 = time.process_time()
        totals = Simulator(stream, producer, topic, labels, rate=args.rate, progress_seconds=5.0).run()
        cpu = time.process_time() - cpu0
        producer.close()
        held = _count(s, [topic, labels])
        delays = append_delays(s, topic, totals.sent)
    finally:
        if not args.keep_topics:
            _delete(s, [topic, labels])
        if started_broker:
            broker.down(s, quiet=True)
    return {
        "target_rate": args.rate,
        "achieved_rate": totals.achieved_rate,
        "p50_send_ms": _round(percentile(delays, 50)),
        "p99_send_ms": _round(percentile(delays, 99)),
        "timed": len(delays),
        "count": args.count,
        "sent": totals.sent,
        "labels_sent": totals.labels_sent,
        "failed": totals.failed + totals.labels_failed,
        "in_topics": held,
        "seconds": totals.seconds,
        "cpu_us_per_tx": round(cpu / max(totals.sent, 1) * 1e6, 1),
        "path": "send" if args.public else "bulk",
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }


def _round(x):
    return None if x is None else round(x, 1)


def _count(s, topics: list[str]) -> dict:
    """Records the topics hold (end offsets), to check against what was counted as sent."""
    return {t: sum(kafka_client.end_offsets(t, s).values()) for t in topics}


def _delete(s, topics: list[str]) -> None:
    try:
        admin = kafka_client.admin(s)
        try:
            admin.delete_topics(topics)
        finally:
            admin.close()
    except Exception as exc:  # the figures matter more than the clean-up
        log(f"could not delete the bench topics ({exc})")
