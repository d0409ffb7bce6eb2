"""The seeded stream of payments, in the order they reach Kafka.

Time: a simulated clock, anchored at `start_ms`, advances by exponential gaps of mean 1/rate
(Poisson arrivals at `rate` per second of event time); a payment's `event_time` is the clock when
it happens. With `--rate` the sender paces the stream so that event time keeps up with the wall
clock; without it the clock runs at `NOMINAL_RATE` and the stream is sent as fast as it goes.

Determinism: every random choice comes from its own numpy generator spawned from the seed, drawn
in blocks whose size depends only on the rate, so one seed (with the same options) gives the same
payments, ids, amounts and order, however fast they are sent. Only `produced_at` differs.

Who pays: ordinary payments take cards from a schedule that alternates random permutations of
the even- and odd-numbered cards. A card therefore pays about once per `CARD_CYCLE_S` (60 s) of
event time and never twice within about half that, so the velocity analyzer (more than 5 in
60 s) never sees ordinary traffic; the default number of cards grows with the rate to keep it
so. After fraud the card is reissued (new id, no history), as issuers do, so its owner's next
ordinary payment is not "impossible travel" back from the fraudster's city.

Shares: each message is malformed with probability `bad_rate`, fraud with `fraud_rate` (a third
per pattern, card-testing bursts counted payment by payment); of the ordinary payments a share
is late so that late ones make up `late_rate` of all messages. A late payment keeps its true
`event_time` but reaches Kafka `late_lag_ms` x U(1, 2) after it happened: behind the stream by
one to two lags, out of order. Until some card has the history a spend spike needs, spike slots
become impossible travel (the fraud share stays). With `count`, the stream ends after exactly
`count` messages; late payments still held back then are sent at once, at the end.
"""
from __future__ import annotations

import heapq
import math
import secrets
from collections import deque
from dataclasses import dataclass
from itertools import chain

import numpy as np

from simulator import patterns as P
from simulator.population import CITIES, MERCHANTS_PER_CITY, Cards, Merchants

NOMINAL_RATE = 1000.0
CARD_CYCLE_S = 60.0
MIN_CARDS = 100
MAX_CARDS = 2_000_000  # memory bound: above ~33,000 tx/s of event time cards pay more often than once a minute
BLOCK_SECONDS = 0.5
BLOCK_RANGE = (8, 1024)
MEAN_BURST = (P.BURST_SIZE[0] + P.BURST_SIZE[1]) / 2
RECENT = 16  # on-time ordinary payments remembered as candidates for impossible travel
YOUNG = 4096  # ... and the newest ones, until they are TRAVEL_MIN_GAP_MS old (enough up to ~400 tx/s)
_LABEL_NORMAL = P.LABEL_FORMAT % ('%s', 'false', P.NORMAL, 'false')
_LABEL_LATE = P.LABEL_FORMAT % ('%s', 'false', P.NORMAL, 'true')


@dataclass(slots=True)
class Event:
    emit_ms: float          # simulated clock when it is due to be sent
    txn_id: str
    key: bytes              # the card id: the Kafka key
    prefix: bytes | None    # a valid transaction's JSON up to "produced_at": (stamped when sent)
    payload: bytes | None   # a malformed message, complete
    label: bytes
    pattern: str
    late: bool
    event_time: int

    def value(self, produced_at: int) -> bytes:
        return self.payload if self.prefix is None else P.stamp(self.prefix, produced_at)


def default_cards(rate: float) -> int:
    return min(MAX_CARDS, max(MIN_CARDS, math.ceil(CARD_CYCLE_S * rate)))


def slot_probabilities(fraud_rate: float, bad_rate: float) -> tuple[float, float, float, float]:
    """Per-slot probabilities (bad, spike, travel, burst start) giving those shares of messages.

    A burst start yields MEAN_BURST messages on average, so with E messages per slot on average:
    bad = B*E, spike = travel = F/3*E and burst = q with q*MEAN_BURST/E = F/3.
    """
    f3 = fraud_rate / 3
    q = f3 / (MEAN_BURST - f3 * (MEAN_BURST - 1))
    per_slot = 1 + q * (MEAN_BURST - 1)
    return bad_rate * per_slot, f3 * per_slot, f3 * per_slot, q


def check_rates(fraud_rate: float, late_rate: float, bad_rate: float) -> None:
    """Raise ValueError (one sentence) unless the three shares make sense together."""
    for name, value in (("fraud rate", fraud_rate), ("late rate", late_rate), ("bad rate", bad_rate)):
        if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
            raise ValueError(f"The {name} must be a share between 0 and 1, not {value!r}.")
    if fraud_rate + bad_rate > 0.8:
        raise ValueError(f"The fraud rate plus the bad rate must be at most 0.8, not {fraud_rate + bad_rate:g}.")
    if late_rate > 1.0 - fraud_rate - bad_rate + 1e-12:
        raise ValueError(f"The late rate can be at most 1 - fraud rate - bad rate ({1 - fraud_rate - bad_rate:g}), "
                         f"since only ordinary payments are made late.")


class CardSchedule:
    """Cards for ordinary payments: alternating random permutations of the even and odd cards."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.queue = np.empty(0, dtype=np.int64)
        self.parity = 0

    def take(self, n: int, n_cards: int) -> np.ndarray:
        while len(self.queue) < n:
            half = np.arange(self.parity, n_cards, 2)
            self.rng.shuffle(half)
            self.queue = np.concatenate([self.queue, half])
            self.parity ^= 1
        out, self.queue = self.queue[:n], self.queue[n:]
        return out


class Stream:
    def __init__(self, seed: int | None = None, rate: float | None = None, *, fraud_rate: float = 0.02,
                 late_rate: float = 0.0, bad_rate: float = 0.0, late_lag_ms: float = 30_000,
                 cards: int | None = None, start_ms: int = 0, count: int | None = None):
        check_rates(fraud_rate, late_rate, bad_rate)
        if rate is not None and not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"The rate must be a positive number of transactions per second, not {rate!r}.")
        if cards is not None and cards < 2:
            raise ValueError(f"There must be at least 2 cards, not {cards!r}.")
        if late_lag_ms < 0:
            raise ValueError(f"The late lag must be zero or more milliseconds, not {late_lag_ms!r}.")
        if count is not None and count < 1:
            raise ValueError(f"The count must be a positive number of transactions, not {count!r}.")
        self.seed = secrets.randbits(32) if seed is None else int(seed)
        gens = [np.random.default_rng(s) for s in np.random.SeedSequence(self.seed).spawn(12)]
        (g_cards, g_merchants, g_sched, self.g_gap, self.g_kind, self.g_amount, self.g_pick,
         self.g_late, self.g_fraud, self.g_bad, self.g_grow, g_id) = gens
        self.id_prefix = f"{int(g_id.integers(0, 2**32)):08x}"
        self.rate = float(rate or NOMINAL_RATE)
        self.auto_cards = cards is None
        self.cards = Cards(g_cards, cards or default_cards(self.rate))
        self.merchants = Merchants(g_merchants)
        self.schedule = CardSchedule(g_sched)
        self.late_lag_ms = float(late_lag_ms)
        self.set_shares(fraud_rate, late_rate, bad_rate)
        self.clock = float(start_ms)
        self.remaining = count
        self.seq = 0
        self.forced_late = 0
        self.forced_bad = 0
        self.next_bad_kind = 0  # forced malformed messages (the bad-input fault) take the kinds in turn
        self.recent: deque = deque(maxlen=YOUNG)  # (card, generation, time) of on-time ordinary payments
        self.seasoned: deque = deque(maxlen=RECENT)  # those of them at least TRAVEL_MIN_GAP_MS old
        self._held: list = []      # late payments: (emit_ms, seq, card, Event)
        self._held_cards: dict[int, int] = {}  # card -> late payments of it still held back
        self._ready: deque[Event] = deque()
        self._finished = False

    # ------------------------------------------------------------------ control
    def set_shares(self, fraud_rate: float, late_rate: float, bad_rate: float) -> None:
        check_rates(fraud_rate, late_rate, bad_rate)
        self.fraud_rate, self.late_rate, self.bad_rate = fraud_rate, late_rate, bad_rate
        b, s, t, q = slot_probabilities(fraud_rate, bad_rate)
        self._thresholds = (b, b + s, b + s + t, b + s + t + q)
        ordinary = 1.0 - fraud_rate - bad_rate
        self._p_late = min(1.0, late_rate / ordinary) if ordinary > 0 else 0.0

    def set_rate(self, rate: float) -> None:
        """Change the event rate from the next block on; more cards when the rate needs them."""
        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"The rate must be a positive number of transactions per second, not {rate!r}.")
        self.rate = float(rate)
        if self.auto_cards:
            self.cards.grow(self.g_grow, default_cards(self.rate) - len(self.cards))

    def force_late(self, n: int) -> None:
        self.forced_late += max(0, int(n))

    def force_bad(self, n: int) -> None:
        self.forced_bad += max(0, int(n))

    def skip(self, ms: float) -> None:
        """Move the clock on (after a pause), so event time keeps up with the wall clock."""
        self.clock += max(0.0, ms)

    # ------------------------------------------------------------------ reading
    @property
    def done(self) -> bool:
        return self._finished and not self._ready

    def next_emit_ms(self) -> float | None:
        if not self._ready and not self._finished:
            self._fill()
        return self._ready[0].emit_ms if self._ready else None

    def take(self, max_n: int, until_ms: float | None = None) -> list[Event]:
        """Up to `max_n` events in send order, only those due by `until_ms` (None: all)."""
        out: list[Event] = []
        ready = self._ready
        while len(out) < max_n:
            if not ready:
                if self._finished:
                    break
                self._fill()
                continue
            if until_ms is not None and ready[0].emit_ms > until_ms:
                break
            out.append(ready.popleft())
        return out

    def __iter__(self):
        while True:
            batch = self.take(4096)
            if not batch:
                return
            yield from batch

    # ------------------------------------------------------------------ generation
    def _block_size(self) -> int:
        return int(min(BLOCK_RANGE[1], max(BLOCK_RANGE[0], round(self.rate * BLOCK_SECONDS))))

    def _next_id(self) -> str:
        self.seq += 1
        return f"{self.id_prefix}-{self.seq:010d}"

    def _emit(self, event: Event) -> None:
        """Send an on-time event at its time, after any late ones due by then."""
        held = self._held
        if held and held[0][0] <= event.emit_ms:
            self._release(event.emit_ms)
        self._ready.append(event)
        self._count_one()

    def _release(self, until_ms: float, at_ms: float | None = None) -> None:
        """Move held late payments due by `until_ms` to the ready queue (sent at `at_ms` if given)."""
        held, ready, held_cards = self._held, self._ready, self._held_cards
        while held and held[0][0] <= until_ms:
            _, _, card, event = heapq.heappop(held)
            held_cards[card] -= 1
            if at_ms is not None:
                event.emit_ms = at_ms
            ready.append(event)

    def _count_one(self) -> None:
        if self.remaining is not None:
            self.remaining -= 1
            if self.remaining <= 0:
                self._finish()

    def _finish(self) -> None:
        self._release(math.inf, at_ms=self.clock)
        self._finished = True

    def _payment(self, card: int, merchant: int, amount: int, pattern: str, late: bool = False) -> Event:
        c, m = self.cards, self.merchants
        txn_id = self._next_id()
        t = int(self.clock + 0.5)
        prefix = P.tx_prefix(txn_id, c.ids[card], m.ids[merchant], amount, c.currency(card),
                             m.lat_list[merchant], m.lon_list[merchant], t)
        return Event(self.clock, txn_id, c.keys[card], prefix, None, P.label(txn_id, pattern, late),
                     pattern, late, t)

    def _fill(self) -> None:
        """Generate one block of slots into the ready queue (the ordinary path inlined: it is 90+ %)."""
        if self._finished:
            return
        n = self._block_size()
        cards, merchants = self.cards, self.merchants
        gaps, u_kind, u_merchant, u_late, u_lag, slot_cards, slot_merchants, slot_amounts, currency = self._draw(n)
        (t_bad, t_spike, t_travel, t_burst), p_late = self._thresholds, self._p_late
        ids, keys, history, generation = cards.ids, cards.keys, cards.history, cards.generation
        m_ids, m_lat, m_lon = merchants.ids, merchants.lat_list, merchants.lon_list
        fmt, label_fmt, late_fmt = P.TX_FORMAT, _LABEL_NORMAL, _LABEL_LATE
        pfx = self.id_prefix + "-"
        ready, held, recent, held_cards = self._ready, self._held, self.recent, self._held_cards
        lag = self.late_lag_ms
        for i in range(n):
            if self._finished:
                return
            self.clock += gaps[i]
            u = u_kind[i]
            card = slot_cards[i]
            if self.forced_bad > 0:
                self.forced_bad -= 1
                self._malformed(card, slot_merchants[i], slot_amounts[i], forced=True)
                continue
            if u >= t_burst:  # ordinary
                late = u_late[i] < p_late
                if self.forced_late > 0:
                    late, self.forced_late = True, self.forced_late - 1
                self.seq += 1
                txn_id = f"{pfx}{self.seq:010d}"
                clock = self.clock
                t = int(clock + 0.5)
                merchant = slot_merchants[i]
                prefix = (fmt % (txn_id, ids[card], m_ids[merchant], slot_amounts[i], currency[i],
                                 m_lat[merchant], m_lon[merchant], t)).encode()
                history[card] += 1
                if late:
                    event = Event(clock + lag * (1.0 + u_lag[i]), txn_id, keys[card], prefix, None,
                                  (late_fmt % txn_id).encode(), P.NORMAL, True, t)
                    heapq.heappush(held, (event.emit_ms, self.seq, card, event))
                    held_cards[card] = held_cards.get(card, 0) + 1
                else:
                    event = Event(clock, txn_id, keys[card], prefix, None, (label_fmt % txn_id).encode(),
                                  P.NORMAL, False, t)
                    if held and held[0][0] <= clock:
                        self._release(clock)
                    ready.append(event)
                    recent.append((card, generation[card], clock))
                if self.remaining is not None:
                    self.remaining -= 1
                    if self.remaining <= 0:
                        self._finish()
            elif u < t_bad:
                self._malformed(card, slot_merchants[i], slot_amounts[i])
            elif u < t_travel:
                self._spike_or_travel(card, u < t_spike, float(u_merchant[i]), gaps[i], slot_merchants[i],
                                      slot_amounts[i])
            else:
                card = self._unheld(card)
                self._burst(card, merchants.in_city(cards.city_list[card], float(u_merchant[i])))

    def _draw(self, n: int) -> tuple:
        """A block's random draws, in the generators' fixed order (the same seed, the same stream):
        (gaps, kind, merchant and late uniforms, lag uniforms, the slots' cards, their ordinary
        merchants, amounts and currencies), as lists where the loop reads them one by one."""
        cards = self.cards
        gaps = self.g_gap.exponential(1000.0 / self.rate, n).tolist()
        u_kind = self.g_kind.random(n).tolist()
        z_amount = self.g_amount.standard_normal(n)
        u_merchant = self.g_pick.random(n)
        u_late = self.g_late.random(n).tolist()
        u_lag = self.g_late.random(n).tolist()
        slot = self.schedule.take(n, len(cards))
        homes = cards.city[slot]
        slot_merchants = (homes * MERCHANTS_PER_CITY
                          + np.minimum((u_merchant * MERCHANTS_PER_CITY).astype(np.int64),
                                       MERCHANTS_PER_CITY - 1)).tolist()
        slot_amounts = np.maximum(P.MIN_AMOUNT_CENTS, np.rint(cards.typical[slot] * np.exp(P.NORMAL_SIGMA * z_amount))
                                  ).astype(np.int64).tolist()
        currency = [CITIES[c][3] for c in homes.tolist()]
        return gaps, u_kind, u_merchant, u_late, u_lag, slot.tolist(), slot_merchants, slot_amounts, currency

    def _spike_or_travel(self, card: int, spike: bool, u_merchant: float, gap: float, merchant: int,
                         amount: int) -> None:
        """A spike on the slot's card (when `spike` and it has history enough; it is then reissued),
        else an impossible-travel pair, else (no card to use yet: the very start) an ordinary payment."""
        cards = self.cards
        spike_card = self._unheld(card) if spike else None
        if spike_card is not None and cards.history[spike_card] >= P.SPIKE_MIN_HISTORY:
            where = self.merchants.in_city(cards.city_list[spike_card], u_merchant)
            spent = P.spike_amount(cards.typical_list[spike_card], float(self.g_fraud.random()))
            self._emit(self._payment(spike_card, where, spent, P.SPIKE))
            cards.reissue(spike_card)
        elif (victim := self._victim(self.clock - gap - P.TRAVEL_MIN_GAP_MS)) is not None:
            self._travel(victim, gap)
        else:
            self._emit(self._payment(card, merchant, amount, P.NORMAL))
            cards.history[card] += 1

    def _unheld(self, card: int) -> int:
        """`card`, or the next scheduled card if a late payment of it is still held back.

        Fraud reissues the card, and a late payment of the old number reaching the analyzers after
        the fraud (after a burst of tiny amounts, say) would look like fraud itself.
        """
        while self._held_cards.get(card):
            card = int(self.schedule.take(1, len(self.cards))[0])
        return card

    def _victim(self, before: float) -> tuple[int, int, float] | None:
        """The most recent on-time ordinary payment, at or before `before`, whose card has not been
        reissued since.

        A card with a late payment still on its way is passed over: that payment would reach the
        proximity analyzer after the fraud, from home, and look like impossible travel itself. With
        none old enough (the stream's first TRAVEL_MIN_GAP_MS, or above ~400 tx/s, where the young
        payments no longer span it) the newest will do, and the travel payment may then also look
        like a burst to the velocity analyzer.
        """
        young, seasoned = self.recent, self.seasoned
        while young and young[0][2] <= before:
            seasoned.append(young.popleft())
        generation, held_cards = self.cards.generation, self._held_cards
        for card, gen, then in chain(reversed(seasoned), reversed(young)):
            if generation[card] == gen and not held_cards.get(card):
                return card, gen, then
        return None

    def _travel(self, victim: tuple[int, int, float], gap: float) -> None:
        card, _, then = victim
        cards, merchants = self.cards, self.merchants
        self.clock = max(self.clock - gap, min(self.clock, then + P.TRAVEL_MAX_GAP_MS))
        far = merchants.far_cities[cards.city_list[card]]
        city = int(far[int(self.g_fraud.integers(len(far)))])
        merchant = merchants.in_city(city, float(self.g_fraud.random()))
        amount = P.normal_amount(cards.typical_list[card], float(self.g_fraud.standard_normal()))
        self._emit(self._payment(card, merchant, amount, P.TRAVEL))
        cards.reissue(card)

    def _burst(self, card: int, merchant: int) -> None:
        size = int(self.g_fraud.integers(P.BURST_SIZE[0], P.BURST_SIZE[1] + 1))
        amounts = self.g_fraud.integers(P.BURST_AMOUNT_CENTS[0], P.BURST_AMOUNT_CENTS[1] + 1, size).tolist()
        steps = np.minimum(self.g_fraud.exponential(1000.0 / self.rate, size), P.BURST_MAX_GAP_MS).tolist()
        for j in range(size):
            if self._finished:
                break
            if j:
                self.clock += steps[j]
            self._emit(self._payment(card, merchant, amounts[j], P.TESTING))
        self.cards.reissue(card)

    def _malformed(self, card: int, merchant: int, amount: int, forced: bool = False) -> None:
        """A malformed message: of the next kind in turn when forced (so the bad-input fault shows
        every kind), of a random kind otherwise."""
        cards, merchants = self.cards, self.merchants
        if forced:
            kind = P.BAD_KINDS[self.next_bad_kind % len(P.BAD_KINDS)]
            self.next_bad_kind += 1
        else:
            kind = P.BAD_KINDS[int(self.g_bad.integers(len(P.BAD_KINDS)))]
        txn_id = self._next_id()
        t = int(self.clock + 0.5)
        fields = {"txn_id": txn_id, "card_id": cards.ids[card], "merchant_id": merchants.ids[merchant],
                  "amount_cents": amount, "currency": cards.currency(card),
                  "lat": round(merchants.lat_list[merchant], 5), "lon": round(merchants.lon_list[merchant], 5),
                  "event_time": t, "produced_at": t}
        payload, has_id = P.malformed(fields, kind, self.g_bad)
        raw = None if has_id else payload  # the label keeps it as text, or base64 if not UTF-8
        self._emit(Event(self.clock, txn_id, cards.keys[card], None, payload,
                         P.label(txn_id, f"bad:{kind}", raw=raw), f"bad:{kind}", False, t))
