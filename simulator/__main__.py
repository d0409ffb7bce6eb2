"""`python -m simulator`: labelled card payments into Kafka, until --count or SIGTERM / Ctrl-C.

    python -m simulator [--rate R] [--count N] [--seed S] [--fraud-rate F] [--late-rate L]
                        [--bad-rate B] [--late-lag-ms MS] [--cards N] [--start-ms MS] ...
    python -m simulator replay FILE [--speed S | --rate R | --max] ...   (a history: simulator/replay/)

Transactions go to the `transactions` topic keyed by card id, ground-truth labels to `labels`
keyed by txn_id. A progress line goes to stderr every few seconds; the totals (JSON) are the last
line on stdout. A user mistake (a bad option, no broker) is one sentence on stderr and exit 2
(bad option) or 1 (anything else), never a traceback.
"""
from __future__ import annotations

import argparse
import sys
import time

from controlplane.store import connect
from infra import logs
from infra.config import load
from simulator.command import Parser, make_topics, number, positive, report
from simulator.control import Control
from simulator.producer import Producer, ProducerError
from simulator.runner import Simulator
from simulator.stream import Stream

LABEL = "simulator"

_non_negative_int = number(int, lambda v: v >= 0, "a whole number of 0 or more")
_share = number(float, lambda v: 0.0 <= v <= 1.0, "a share between 0 and 1")


def parser(settings) -> argparse.ArgumentParser:
    p = Parser(prog="python -m simulator", label=LABEL, description="Produce labelled card payments to Kafka.")
    p.add_argument("--rate", type=positive(float, "a positive number of transactions per second"),
                   help="transactions per second (Poisson arrivals); omitted: as fast as possible")
    p.add_argument("--count", type=positive(int, "a positive whole number of transactions"),
                   help="stop after exactly this many transactions; omitted: run until stopped")
    p.add_argument("--seed", type=_non_negative_int, help="the same seed gives the same stream; omitted: random")
    p.add_argument("--fraud-rate", type=_share, default=0.02, help="share of fraudulent transactions (0.02)")
    p.add_argument("--late-rate", type=_share, default=0.01, help="share of late, out-of-order events (0.01)")
    p.add_argument("--bad-rate", type=_share, default=0.0, help="share of malformed messages (0)")
    p.add_argument("--late-lag-ms", type=_non_negative_int, default=settings.watermark_seconds * 1000,
                   help="a late event arrives 1-2 lags after it happened (default: the watermark, "
                        f"{settings.watermark_seconds} s)")
    p.add_argument("--cards", type=positive(int, "a whole number of cards of at least 2"),
                   help="number of cards (default: 60 per tx/s of rate, so a card pays about once a minute)")
    p.add_argument("--event-rate", type=positive(float, "a positive number of transactions per second"),
                   default=1000.0, help="without --rate: how fast event time runs, in tx/s (1000)")
    p.add_argument("--start-ms", type=_non_negative_int, help="event time of the start (default: now)")
    p.add_argument("--topic", default=settings.topics.transactions, help="transactions topic")
    p.add_argument("--labels-topic", default=settings.topics.labels, help="labels topic")
    p.add_argument("--bootstrap", default=settings.kafka_bootstrap, help="Kafka bootstrap servers")
    p.add_argument("--no-control", action="store_true", help="do not take commands from the store")
    p.add_argument("--progress-seconds", type=float, default=5.0, help="progress line interval; 0: none")
    p.add_argument("--linger-ms", type=_non_negative_int, default=5, help="producer linger (5 ms)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["replay"]:  # python -m simulator replay FILE ...: simulator/replay/
        # deferred: pyarrow and the history's modules load only for a replay
        from simulator.replay.cli import main as replay

        return replay(argv[1:])

    logs.setup()
    try:
        return _main(argv)
    except ProducerError as exc:
        print(f"simulator: {exc.code}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("simulator: interrupted before the first transaction was sent.", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    settings = load()
    args = parser(settings).parse_args(argv)
    try:
        stream = Stream(args.seed, args.rate or args.event_rate, fraud_rate=args.fraud_rate,
                        late_rate=args.late_rate, bad_rate=args.bad_rate, late_lag_ms=args.late_lag_ms,
                        cards=args.cards, start_ms=args.start_ms if args.start_ms is not None
                        else int(time.time() * 1000), count=args.count)
    except ValueError as exc:
        print(f"simulator: {exc}", file=sys.stderr)
        return 2
    if args.cards is not None and args.cards < 60 * (args.rate or args.event_rate) / 2:
        print(f"simulator: note: {args.cards} cards at {args.rate or args.event_rate:g} tx/s pay more than "
              f"every 30 s each; the velocity analyzer may flag ordinary traffic.", file=sys.stderr)

    producer = Producer(args.bootstrap, linger_ms=args.linger_ms)  # ProducerError: one sentence
    try:
        make_topics(settings, args.bootstrap, args.topic, args.labels_topic)
        control = None if args.no_control else Control(connect(s=settings))
        print(f"simulator: seed {stream.seed}, {len(stream.cards):,} cards, to {args.topic} / "
              f"{args.labels_topic} on {args.bootstrap}"
              + (f", {args.rate:g} tx/s" if args.rate else ", as fast as possible"), file=sys.stderr, flush=True)
        totals = Simulator(stream, producer, args.topic, args.labels_topic, rate=args.rate, control=control,
                           progress_seconds=args.progress_seconds).run()
    finally:
        producer.close()
    return report(LABEL, totals)


if __name__ == "__main__":
    sys.exit(main())
