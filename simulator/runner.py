"""The simulator's main loop: take due events from the stream, stamp them, hand them to Kafka.

Pacing: with a rate, an event is sent when the wall clock reaches its place on the simulated
clock (so event time keeps up with the wall clock); without one, as fast as the producer takes
them. `produced_at` is stamped per small batch right before its records are encoded, so it is
within a millisecond or two of the real append. Between batches the loop polls the command table
(twice a second), prints a progress line to stderr (every few seconds) and watches for SIGTERM
or Ctrl-C, which end the run: everything appended is flushed, and the totals, counted from the
broker's acknowledgements, are the last line on stdout.
"""
from __future__ import annotations

import logging
import signal
import sys
import time
from dataclasses import dataclass

from simulator.delivery import Delivered, flush_all, unacknowledged
from simulator.producer import Producer
from simulator.stream import Stream

log = logging.getLogger("simulator")

SEND_BATCH = 512          # events per append when unthrottled: keeps produced_at within ~1-2 ms
CONTROL_EVERY_S = 0.5
TICK_S = 0.02             # paced: send what is due every 20 ms, so each append carries a batch


@dataclass
class Totals(Delivered):
    unacknowledged: int
    seconds: float
    achieved_rate: float
    seed: int
    topic: str
    labels_topic: str


class Simulator:
    """One run: a stream, a producer, optional control; `run()` returns the totals."""

    def __init__(self, stream: Stream, producer: Producer, topic: str, labels_topic: str, *,
                 rate: float | None, control=None, progress_seconds: float = 5.0, err=sys.stderr):
        self.stream = stream
        self.producer = producer
        self.topic = topic
        self.labels_topic = labels_topic
        self.rate = rate
        self.control = control
        self.progress_seconds = progress_seconds
        self.err = err
        self.paused = False
        self.stopping = False
        self._signals = 0
        self._paused_at: float | None = None
        self._anchor_wall = time.monotonic()
        self._anchor_clock = stream.clock

    # ------------------------------------------------------------------ commands (control.Target)
    def pause(self) -> str:
        if self.paused:
            return "already paused"
        self.paused, self._paused_at = True, time.monotonic()
        return "paused"

    def resume(self) -> str:
        if not self.paused:
            return "not paused"
        away = time.monotonic() - self._paused_at
        self.paused, self._paused_at = False, None
        if self.rate is not None:  # new events keep up with the wall clock again
            self.stream.skip(away * 1000)
        return f"resumed after {away:.1f} s"

    def set_rate(self, rate: float) -> str:
        self.stream.set_rate(rate)
        if self.rate is None:  # from as-fast-as-possible to paced: anchor the clock here
            self._anchor_wall = time.monotonic()
            self._anchor_clock = self.stream.next_emit_ms() or self.stream.clock
        self.rate = rate
        return f"rate {rate:g}/s ({len(self.stream.cards):,} cards)"

    def set_shares(self, fraud_rate: float | None = None, late_rate: float | None = None) -> str:
        s = self.stream
        s.set_shares(s.fraud_rate if fraud_rate is None else fraud_rate,
                     s.late_rate if late_rate is None else late_rate, s.bad_rate)
        return f"fraud rate {s.fraud_rate:g}, late rate {s.late_rate:g}"

    def late_burst(self, count: int) -> str:
        self.stream.force_late(count)
        return f"the next {count} ordinary payments are late by {self.stream.late_lag_ms / 1000:g}-" \
               f"{2 * self.stream.late_lag_ms / 1000:g} s"

    def bad_input(self, count: int) -> str:
        self.stream.force_bad(count)
        return f"the next {count} messages are malformed"

    # ------------------------------------------------------------------ the loop
    def _on_signal(self, signum, _frame) -> None:
        self._signals += 1
        self.stopping = True

    def _send(self, events) -> None:
        now = int(time.time() * 1000)
        stamp = b"%d}" % now
        self.producer.send_many(self.topic, [e.key for e in events],
                                [e.prefix + stamp if e.prefix is not None else e.payload for e in events], now)
        self.producer.send_many(self.labels_topic, [e.txn_id.encode() for e in events],
                                [e.label for e in events], now)

    def _progress(self, started: float, last: list) -> None:
        now = time.monotonic()
        tx = self.producer.totals(self.topic)
        labels = self.producer.totals(self.labels_topic)
        rate = (tx.sent - last[1]) / max(now - last[0], 1e-9)
        last[:] = [now, tx.sent]
        target = "as fast as possible" if self.rate is None else f"target {self.rate:,.0f}/s"
        state = ", paused" if self.paused else ""
        log.info("%s tx/s (%s%s), sent %s, failed %s, labels sent %s, %s s", f"{rate:,.0f}", target, state,
                 f"{tx.sent:,}", f"{tx.failed:,}", f"{labels.sent:,}", f"{now - started:,.0f}")

    def run(self) -> Totals:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        started = time.monotonic()
        self._anchor_wall = started
        next_control, next_progress = started, started + self.progress_seconds
        last = [started, 0]
        stream, producer = self.stream, self.producer
        try:
            while not self.stopping:
                now = time.monotonic()
                if self.control is not None and now >= next_control:
                    self.control.poll(self)
                    next_control = now + CONTROL_EVERY_S
                if self.progress_seconds and now >= next_progress:
                    self._progress(started, last)
                    next_progress = now + self.progress_seconds
                if self.paused:
                    time.sleep(0.05)
                    continue
                if stream.done:
                    break
                if producer.outstanding > producer.max_outstanding:  # the broker is behind (or down)
                    time.sleep(TICK_S)
                    continue
                if self.rate is None:
                    self._send(stream.take(SEND_BATCH))
                    continue
                due = self._anchor_clock + (now - self._anchor_wall) * 1000
                events = stream.take(SEND_BATCH, until_ms=due)
                if events:
                    self._send(events)
                    time.sleep(max(0.0, TICK_S - (time.monotonic() - now)))
                else:
                    upcoming = stream.next_emit_ms()
                    if upcoming is not None:
                        time.sleep(min(max(upcoming - due, TICK_S * 1000), 50.0) / 1000)
            self._flush()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        elapsed = time.monotonic() - started
        tx, labels = producer.totals(self.topic), producer.totals(self.labels_topic)
        if self.progress_seconds:
            self._progress(started, last)
        return Totals(tx.sent, tx.failed, labels.sent, labels.failed, unacknowledged(tx, labels),
                      round(elapsed, 3), round(tx.sent / elapsed, 1) if elapsed > 0 else 0.0,
                      stream.seed, self.topic, self.labels_topic)

    def _flush(self) -> None:
        """Wait for every appended record's fate; a second SIGTERM / Ctrl-C stops waiting."""
        signals = self._signals
        if not flush_all(self.producer, lambda: self._signals > max(signals, 1)):
            log.warning("stopped waiting for the broker's acknowledgements.")
