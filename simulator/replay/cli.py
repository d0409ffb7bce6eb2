"""`python -m simulator replay FILE ...` (simulator/replay/__init__.py says what it does): the
options, the history loaded and validated before any connection, the producer, the report."""
from __future__ import annotations

import argparse
import datetime as dt
import math
import re
import sys
import uuid
from pathlib import Path

from infra import logs
from infra.config import load
from infra.histories import COLUMN_MAPS, DAY_MS
from infra.history import HistoryError, load_history
from infra.history.checks import fmt_ms
from simulator.command import Parser, make_topics, number, positive, report
from simulator.producer import Producer, ProducerError
from simulator.replay.replayer import Pace, Replayer
from simulator.replay.schedule import schedule

LABEL = "replay"


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a date as YYYY-MM-DD, not {text!r}") from None


def _run_id(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9._:-]{1,100}", text):
        raise argparse.ArgumentTypeError(f"must be 1 to 100 letters, digits or . _ : -, not {text!r}")
    return text


def new_run_id() -> str:
    return f"replay-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def parser(settings) -> argparse.ArgumentParser:
    p = Parser(prog="python -m simulator replay", label=LABEL,
               description="Replay a labelled transaction history onto Kafka in event time, each label after "
                           "its feedback delay.")
    p.add_argument("file", metavar="FILE", type=Path, help="the history: Parquet or CSV, in event-time order")
    cols = p.add_mutually_exclusive_group()
    cols.add_argument("--columns", choices=sorted(COLUMN_MAPS),
                      help="a built-in column map (default: handbook, when the file has its columns)")
    cols.add_argument("--column-map", metavar="FIELD=COLUMN,...",
                      help="the file's columns: txn_id=,event_time=,card_id=,merchant_id=,amount=,is_fraud= "
                           "(and pattern=, lat=,lon=, currency=EUR, id_prefix=)")
    pace = p.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=positive(float, "a positive number of event seconds per second"),
                      help="event seconds per wall second (86400: a day a second)")
    pace.add_argument("--rate", type=positive(float, "a positive number of transactions per second"),
                      help="transactions per second")
    pace.add_argument("--max", action="store_true", help="as fast as the producer goes (the default)")
    p.add_argument("--from", dest="start", type=_date, metavar="DATE", help="first day replayed (UTC, included)")
    p.add_argument("--to", dest="end", type=_date, metavar="DATE", help="last day replayed (UTC, included)")
    p.add_argument("--label-delay-days", type=number(float, lambda v: v >= 0 and math.isfinite(v),
                                                     "a number of days of 0 or more"),
                   default=float(settings.label_delay_days),
                   help=f"a label is sent this long after its transaction, in event time "
                        f"({settings.label_delay_days}; the fraud job assumes LABEL_DELAY_DAYS)")
    p.add_argument("--run-id", type=_run_id, help="the replay header's value (default: a fresh one, printed)")
    p.add_argument("--topic", default=settings.topics.transactions, help="transactions topic")
    p.add_argument("--labels-topic", default=settings.topics.labels, help="labels topic")
    p.add_argument("--bootstrap", default=settings.kafka_bootstrap, help="Kafka bootstrap servers")
    p.add_argument("--linger-ms", type=int, default=5, help="producer linger (5 ms)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None, producer_factory=None) -> int:
    """The command; `producer_factory(bootstrap, linger_ms)` makes the sender (default: the bulk
    Producer). Nothing is sent, nor any connection opened, before the history is validated."""
    logs.setup()
    try:
        return _main(argv, producer_factory or _producer)
    except HistoryError as exc:
        print(f"{LABEL}: {exc}", file=sys.stderr)
        return 2
    except ProducerError as exc:
        print(f"{LABEL}: {exc.code}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{LABEL}: interrupted before the first transaction was sent.", file=sys.stderr)
        return 130


def _producer(bootstrap: str, linger_ms: int) -> Producer:
    return Producer(bootstrap, linger_ms=linger_ms, client_id="cardstream-replay")


def _main(argv, producer_factory) -> int:
    settings = load()
    args = parser(settings).parse_args(argv)
    history = load_history(args.file, columns=args.columns, column_map=args.column_map,
                           start=args.start, end=args.end)
    delay_ms = round(args.label_delay_days * DAY_MS)
    run_id = args.run_id or new_run_id()
    pace = Pace(speed=args.speed, rate=args.rate)
    producer = producer_factory(args.bootstrap, args.linger_ms)  # ProducerError: one sentence
    try:
        make_topics(settings, args.bootstrap, args.topic, args.labels_topic)
        _announce(history, args, run_id, pace, delay_ms)
        totals = Replayer(history, producer, args.topic, args.labels_topic, run_id=run_id, delay_ms=delay_ms,
                          pace=pace, progress=not args.no_progress).run()
    finally:
        producer.close()
    code = report(LABEL, totals, "{:,}".format)
    if code == 0 and totals.interrupted:
        print(f"{LABEL}: interrupted after {totals.sent:,} transactions (up to {totals.last_event_utc}).",
              file=sys.stderr)
        return 130
    return code


def _announce(history, args, run_id: str, pace: Pace, delay_ms: int) -> None:
    """What is about to be sent, where and how fast: one paragraph on stderr."""
    plan = schedule(history.event_ms, delay_ms)
    print(f"{LABEL}: run {run_id}: {len(history):,} transactions of {history.path.name} (columns: "
          f"{history.cmap.name}), {fmt_ms(int(history.event_ms[0]))} .. {fmt_ms(int(history.event_ms[-1]))} "
          f"UTC, to {args.topic} / {args.labels_topic} on {args.bootstrap}, {pace.describe()}; labels "
          f"{args.label_delay_days:g} days after their transactions: {plan.labels:,} to send, "
          f"{plan.pending:,} later than the last transaction.", file=sys.stderr, flush=True)
