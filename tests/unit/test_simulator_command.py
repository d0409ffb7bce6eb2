"""What the simulator's two commands share (simulator/command.py, simulator/delivery.py): option
types that say one sentence, the topics made or a ProducerError, the report's exit code, the
totals' fields in order, and the wait for the last acknowledgements."""
from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from simulator.command import Parser, number, positive, report
from simulator.delivery import Delivered, flush_all, unacknowledged
from simulator.producer import TopicStats


def test_a_number_option_takes_what_its_check_accepts_and_says_why_not():
    share = number(float, lambda v: 0 <= v <= 1, "a share")
    assert share("0.25") == 0.25
    for text in ("1.5", "x", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"must be a share, not '{text}'"):
            share(text)
    count = positive(int, "a count")
    assert count("3") == 3
    for text in ("0", "-2", "2.5"):
        with pytest.raises(argparse.ArgumentTypeError, match="must be a count"):
            count(text)
    with pytest.raises(argparse.ArgumentTypeError):
        positive(float, "a rate")("inf")


def test_a_parser_complains_in_one_sentence_under_its_label(capsys):
    p = Parser(prog="x", label="replay")
    p.add_argument("--n", type=positive(int, "a count"))
    with pytest.raises(SystemExit) as exit_:
        p.parse_args(["--n", "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "replay: Argument --n: must be a count, not '0'.\n"


@dataclasses.dataclass
class Run(Delivered):
    unacknowledged: int
    seed: int


def test_the_totals_line_keeps_the_shared_fields_first():
    assert list(json.loads(Run(5, 0, 5, 0, 0, 7).line())) == ["sent", "failed", "labels_sent", "labels_failed",
                                                               "unacknowledged", "seed"]


@pytest.mark.parametrize("totals, code, said", [
    (Run(1000, 0, 1000, 0, 0, 1), 0, ""),
    (Run(1000, 1500, 1000, 2, 0, 1), 1, "x: 1,502 messages failed and 0 were not acknowledged.\n"),
    (Run(1, 0, 1, 0, 1200, 1), 1, "x: 0 messages failed and 1,200 were not acknowledged.\n"),
])
def test_the_report_prints_the_totals_last_and_fails_on_any_loss(capsys, totals, code, said):
    assert report("x", totals, "{:,}".format) == code
    out, err = capsys.readouterr()
    assert out == totals.line() + "\n" and err == said


def test_the_report_writes_numbers_as_told(capsys):
    report("simulator", Run(0, 1500, 0, 0, 0, 1))
    assert capsys.readouterr().err == "simulator: 1500 messages failed and 0 were not acknowledged.\n"


def test_records_whose_fate_is_untold_are_the_unacknowledged():
    assert unacknowledged(TopicStats(10, 6, 1), TopicStats(5, 5, 0)) == 3
    assert unacknowledged() == 0


class Pending:
    """A producer whose records are acknowledged one per flush."""

    def __init__(self, n):
        self.outstanding, self.flushes = n, 0

    def flush(self, timeout=None):
        self.flushes += 1
        self.outstanding -= 1


def test_the_flush_waits_for_every_record_unless_told_to_give_up():
    p = Pending(3)
    assert flush_all(p) is True and p.outstanding == 0 and p.flushes == 3
    p = Pending(3)
    assert flush_all(p, give_up=lambda: p.flushes >= 1) is False and p.outstanding == 2
    p = Pending(3)
    assert flush_all(p, timeout=0) is True and p.flushes == 0   # the deadline has passed: no wait


