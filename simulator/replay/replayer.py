"""The replay's loop: due slices of transactions and labels handed to the producer, paced, until
the end or SIGTERM / Ctrl-C; the totals counted from the broker's acknowledgements."""
from __future__ import annotations

import datetime as dt
import signal
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from infra.histories import REPLAY_HEADER
from infra.history import History
from infra.history.checks import fmt_ms
from simulator.delivery import Delivered, flush_all, unacknowledged
from simulator.replay.records import labels, transactions
from simulator.replay.schedule import schedule

SLICE = 1024              # transactions (and labels) per append: produced_at within a few ms of the send
TICK_S = 0.02             # paced: what is due is sent every 20 ms
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


@dataclass(frozen=True)
class Pace:
    """How fast: `speed` event seconds per wall second, or `rate` transactions a second, or neither
    (as fast as the producer takes them)."""
    speed: float | None = None
    rate: float | None = None

    def describe(self) -> str:
        if self.speed:
            return f"{self.speed:g}x event time"
        if self.rate:
            return f"{self.rate:,.0f} tx/s"
        return "as fast as possible"


@dataclass
class Totals(Delivered):
    labels_pending: int
    unacknowledged: int
    run_id: str
    first_event_time: int | None
    last_event_time: int | None
    first_event_utc: str | None
    last_event_utc: str | None
    tx_per_s: float
    wall_s: float
    interrupted: bool
    topic: str
    labels_topic: str


class Replayer:
    """One replay: a validated history, a sender (simulator.producer.Producer), `run()` -> Totals.
    `sent_tx` and `sent_labels` are the positions reached: transactions and labels appended (not
    yet acknowledged)."""

    def __init__(self, history: History, sender, topic: str, labels_topic: str, *, run_id: str,
                 delay_ms: int, pace: Pace = Pace(), progress: bool = True, err=sys.stderr, slice_size: int = SLICE):
        self.h, self.sender, self.run_id = history, sender, run_id
        self.topic, self.labels_topic = topic, labels_topic
        self.headers = [(REPLAY_HEADER, run_id.encode())]
        self.schedule = schedule(history.event_ms, delay_ms)
        self.pace, self.progress, self.err, self.slice = pace, progress, err, slice_size
        self.stopping = False
        self.sent_tx = self.sent_labels = 0

    def _on_signal(self, _signum, _frame) -> None:
        self.stopping = True

    def run(self) -> Totals:
        """Send everything due until the end or a signal, wait for the acknowledgements, count them."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)} \
            if threading.current_thread() is threading.main_thread() else {}
        bar = tqdm(total=len(self.h), unit="tx", unit_scale=True, file=self.err, disable=not self.progress,
                   mininterval=0.5, smoothing=0.1, dynamic_ncols=True, bar_format=BAR_FORMAT)
        started = time.monotonic()
        try:
            self._loop(started, bar)
            flush_all(self.sender)
        finally:
            bar.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self._totals(time.monotonic() - started)

    def _loop(self, started: float, bar) -> None:
        """Labels first (those due before the next transaction), then the next slice of transactions
        due; a short sleep when nothing is."""
        n, total_labels = len(self.h), self.schedule.labels
        while (self.sent_tx < n or self.sent_labels < total_labels) and not self.stopping:
            due, clock = self._due(time.monotonic(), started)
            if self._send_labels(clock):
                continue
            if not self._send_transactions(due, bar):
                time.sleep(self._wait(self.sent_tx, self.sent_labels, clock))

    def _due(self, now: float, started: float) -> tuple[int, float | None]:
        """(how many transactions are due, the event clock in ms under --speed)."""
        n, t = len(self.h), self.h.event_ms
        if self.pace.speed:
            clock = t[0] + (now - started) * self.pace.speed * 1000
            return int(np.searchsorted(t, clock, side="right")), clock
        if self.pace.rate:
            return min(n, int((now - started) * self.pace.rate) + 1), None
        return n, None

    def _send_labels(self, clock: float | None) -> bool:
        """The labels due before the next transaction, a slice at most: every transaction at or
        before their time is sent (and under --speed the event clock has reached it)."""
        s, l = self.schedule, self.sent_labels
        m = int(np.searchsorted(s.after[:s.labels], self.sent_tx, side="right"))
        if clock is not None:
            m = min(m, int(np.searchsorted(s.known_ms[:s.labels], clock, side="right")))
        if m <= l:
            return False
        m = min(m, l + self.slice)
        self.sender.wait_for_room(lambda: self.stopping)
        keys, values = labels(self.h, s, l, m)
        self.sender.send_many(self.labels_topic, keys, values, int(time.time() * 1000), headers=self.headers)
        self.sent_labels = m
        return True

    def _send_transactions(self, due: int, bar) -> bool:
        """The next slice of due transactions, produced_at stamped right before the append."""
        i = self.sent_tx
        j = min(max(due, i), i + self.slice, len(self.h))
        if j == i:
            return False
        self.sender.wait_for_room(lambda: self.stopping)
        keys, values = transactions(self.h, i, j)
        stamp = int(time.time() * 1000)
        tail = b"%d}" % stamp
        self.sender.send_many(self.topic, keys, [v + tail for v in values], stamp, headers=self.headers)
        self.sent_tx = j
        bar.update(j - i)
        bar.set_postfix_str(f"event day {fmt_ms(int(self.h.event_ms[j - 1]))[:10]}", refresh=False)
        return True

    def _wait(self, i: int, l: int, clock: float | None) -> float:
        """Seconds to sleep when nothing is due (at most a tick)."""
        if clock is None or not self.pace.speed:
            return TICK_S
        upcoming = [float(self.h.event_ms[i])] if i < len(self.h) else []
        if l < self.schedule.labels:
            upcoming.append(float(self.schedule.known_ms[l]))
        if not upcoming:
            return TICK_S
        return min(max((min(upcoming) - clock) / self.pace.speed / 1000, 0.001), TICK_S * 2.5)

    def _totals(self, wall: float) -> Totals:
        tx, lb = self.sender.totals(self.topic), self.sender.totals(self.labels_topic)
        first = int(self.h.event_ms[0]) if len(self.h) else None
        last = int(self.h.event_ms[self.sent_tx - 1]) if self.sent_tx else None
        return Totals(tx.sent, tx.failed, lb.sent, lb.failed, len(self.schedule.known_ms) - self.sent_labels,
                      unacknowledged(tx, lb), self.run_id, first, last, _iso(first), _iso(last),
                      round(tx.sent / wall, 1) if wall > 0 else 0.0, round(wall, 3), self.stopping,
                      self.topic, self.labels_topic)


def _iso(ms: int | None) -> str | None:
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")
