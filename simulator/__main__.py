"""`python -m simulator`: labelled card payments into Kafka, until --count or SIGTERM / Ctrl-C.

    python -m simulator [--rate R] [--count N] [--seed S] [--fraud-rate F] [--late-rate L]
                        [--bad-rate B] [--late-lag-ms MS] [--cards N] [--start-ms MS] ...
    python -m simulator replay FILE [--speed S | --rate R | --max] ...   (a history: simulator/replay.py)

Transactions go to the `transactions` topic keyed by card id, ground-truth labels to `labels`
keyed by txn_id. A progress line goes to stderr every few seconds; the totals (JSON) are the last
line on stdout. A user mistake (a bad option, no broker) is one sentence on stderr and exit 2
(bad option) or 1 (anything else), never a traceback.
"""
from __future__ import annotations

import argparse
import math
import sys
import time


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        text = message[0].upper() + message[1:]
        print(f"simulator: {text.rstrip('.')}.", file=sys.stderr)
        raise SystemExit(2)


def _positive(kind, what):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}") from None
        if not (value > 0 and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}")
        return value
    return parse


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a share between 0 and 1, not {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a share between 0 and 1, not {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of 0 or more, not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number of 0 or more, not {text!r}")
    return value


def parser(settings) -> argparse.ArgumentParser:
    p = _Parser(prog="python -m simulator", description="Produce labelled card payments to Kafka.")
    p.add_argument("--rate", type=_positive(float, "a positive number of transactions per second"),
                   help="transactions per second (Poisson arrivals); omitted: as fast as possible")
    p.add_argument("--count", type=_positive(int, "a positive whole number of transactions"),
                   help="stop after exactly this many transactions; omitted: run until stopped")
    p.add_argument("--seed", type=_non_negative_int, help="the same seed gives the same stream; omitted: random")
    p.add_argument("--fraud-rate", type=_share, default=0.02, help="share of fraudulent transactions (0.02)")
    p.add_argument("--late-rate", type=_share, default=0.01, help="share of late, out-of-order events (0.01)")
    p.add_argument("--bad-rate", type=_share, default=0.0, help="share of malformed messages (0)")
    p.add_argument("--late-lag-ms", type=_non_negative_int, default=settings.watermark_seconds * 1000,
                   help="a late event arrives 1-2 lags after it happened (default: the watermark, "
                        f"{settings.watermark_seconds} s)")
    p.add_argument("--cards", type=_positive(int, "a whole number of cards of at least 2"),
                   help="number of cards (default: 60 per tx/s of rate, so a card pays about once a minute)")
    p.add_argument("--event-rate", type=_positive(float, "a positive number of transactions per second"),
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
    if argv[:1] == ["replay"]:  # python -m simulator replay FILE ...: simulator/replay.py
        from simulator.replay import main as replay

        return replay(argv[1:])

    from infra import logs
    from simulator.producer import ProducerError

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
    from infra.config import load

    settings = load()
    args = parser(settings).parse_args(argv)

    from simulator.producer import Producer
    from simulator.runner import Simulator
    from simulator.stream import Stream

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
        _ensure_topics(settings, args)
        control = None
        if not args.no_control:
            from controlplane.store import connect
            from simulator.control import Control

            control = Control(connect(s=settings))
        print(f"simulator: seed {stream.seed}, {len(stream.cards):,} cards, to {args.topic} / "
              f"{args.labels_topic} on {args.bootstrap}"
              + (f", {args.rate:g} tx/s" if args.rate else ", as fast as possible"), file=sys.stderr, flush=True)
        totals = Simulator(stream, producer, args.topic, args.labels_topic, rate=args.rate, control=control,
                           progress_seconds=args.progress_seconds).run()
    finally:
        producer.close()
    print(totals.line(), flush=True)
    if totals.failed or totals.labels_failed or totals.unacknowledged:
        print(f"simulator: {totals.failed + totals.labels_failed} messages failed and "
              f"{totals.unacknowledged} were not acknowledged.", file=sys.stderr)
        return 1
    return 0


def _ensure_topics(settings, args) -> None:
    from dataclasses import replace

    from kafka.errors import KafkaError

    from infra.topics import ensure_topics
    from simulator.producer import ProducerError

    try:
        ensure_topics([args.topic, args.labels_topic],
                      s=replace(settings, external_bootstrap=args.bootstrap))
    except KafkaError as exc:
        raise ProducerError(f"Could not create the topics {args.topic} and {args.labels_topic} "
                            f"({type(exc).__name__}).") from None


if __name__ == "__main__":
    sys.exit(main())
