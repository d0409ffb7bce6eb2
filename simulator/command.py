"""What the simulator's two commands (`python -m simulator`, `python -m simulator replay`) share:
options read into numbers with one sentence when they are not, the topics made before the first
record, and the end of a run reported from the broker's acknowledgements."""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace

from kafka.errors import KafkaError

from infra.topics import ensure_topics
from simulator.producer import ProducerError


class Parser(argparse.ArgumentParser):
    """An argument parser whose every complaint is one sentence on stderr, `label: ...`, and exit 2."""

    def __init__(self, *args, label: str, **kw):
        super().__init__(*args, **kw)
        self.label = label

    def error(self, message: str):
        text = message[0].upper() + message[1:]
        print(f"{self.label}: {text.rstrip('.')}.", file=sys.stderr)
        raise SystemExit(2)


def number(kind, ok, what: str):
    """An option's type: `kind(text)` (int or float) that `ok(value)` accepts, else "must be WHAT, not 'TEXT'"."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}")
        return value
    return parse


def positive(kind, what: str):
    """A finite number above 0."""
    return number(kind, lambda v: v > 0 and math.isfinite(v), what)


def make_topics(settings, bootstrap: str, *topics: str) -> None:
    """The topics, made if missing, on `bootstrap` (which may be another broker than the settings'):
    before the first record, so a run never writes into a topic Kafka made with its defaults."""
    try:
        ensure_topics(list(topics), s=replace(settings, external_bootstrap=bootstrap))
    except KafkaError as exc:
        raise ProducerError(f"Could not create the topics {' and '.join(topics)} "
                            f"({type(exc).__name__}).") from None


def report(label: str, totals, count=str) -> int:
    """The totals as the last line on stdout; 1, said on stderr, when any message failed or was not
    acknowledged, else 0. `count` writes a number (`"{:,}".format`: with thousands separators)."""
    print(totals.line(), flush=True)
    if totals.failed or totals.labels_failed or totals.unacknowledged:
        print(f"{label}: {count(totals.failed + totals.labels_failed)} messages failed and "
              f"{count(totals.unacknowledged)} were not acknowledged.", file=sys.stderr)
        return 1
    return 0
