"""The evaluation set: labelled payments drawn by rules the fraud analyzers were never tuned on.

Why: the live simulator's fraud patterns (simulator/patterns.py) are built from the analyzers'
own limits, so detecting them is a consistency check, not a measurement. This set is drawn with
its own seed from its own rules, written from how card fraud is described (compromised terminals,
stolen card numbers whose spend drifts up, card testing, cloned cards used abroad), next to
legitimate payments that look like fraud (big purchases, flights, supermarket bursts). Nothing
here reads the analyzers' limits: the module imports nothing from `pipelines` (a unit test
checks), and its constants were chosen before the analyzers were run on it.

Pure: `evaluation_set(seed, ...)` returns the transactions (the contract's fields, in event-time
order) and their labels; the same seed gives the same set. `bench quality` sends it through the
real fraud job and measures precision, recall and average precision per pattern.

Patterns (fraud first; each a share of the cards, drawn independently):
- compromised-terminal: a colluding or hacked terminal charges cards of its city that never paid
  there, amounts uniform 20..300 (whatever each card usually spends), over a 12-hour window.
- compromised-card: a stolen card number; 4..12 card-not-present payments at merchants of the
  home city over 2..36 hours, the first near the card's usual spend, each next one 1.15..1.6 x
  the previous (the fraudster tries how far the card goes). The owner keeps paying as usual.
- card-testing: 3..25 tiny payments (0.50..9.99) at merchants of one random city, gaps lognormal
  with a 40 s median, then with probability 1/2 a cash-out of 5..15 x the card's usual spend.
- travel-fraud: a cloned card used in another city (any distance) 1..4 times over a few hours,
  the first a lognormal 3 hours (median) after the owner's last payment; ordinary amounts.
- large-purchase (legitimate): one payment of 4..25 x the card's usual spend at home.
- flight (legitimate): the owner flies to another city: the first payment there comes after the
  flight (distance / 850 km/h) plus 1.5..3 hours at airports, then 1..5 more during the stay.
- supermarket-burst (legitimate): 3..7 payments within 2..15 minutes at 1..3 shops of the home
  city (a split basket, a mall), smaller than usual.
- ordinary (legitimate): every card's own payments: Poisson, a lognormal 2.5 a day (median),
  amounts lognormal around the card's usual spend (sigma 0.6), 70 % at its five regular shops.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simulator.population import CITIES, haversine_km, scatter

SEED = 20_240_614            # the evaluation set's own seed, apart from the simulator's
CARDS = 1_500
DAYS = 3.0
MIN_DAYS = 2.0                 # flights and stays need a day of room
HOUR_MS, DAY_MS = 3_600_000, 86_400_000
MERCHANTS_PER_CITY = 150
MERCHANT_RADIUS_KM = 20.0
HOME_RADIUS_KM = 15.0
USUAL_MEDIAN_CENTS, USUAL_SIGMA = 4_000, 0.9
USUAL_RANGE_CENTS = (200, 150_000)
PER_DAY_MEDIAN, PER_DAY_SIGMA = 2.5, 0.6
AMOUNT_SIGMA = 0.6
REGULAR_SHOPS, REGULAR_SHARE = 5, 0.7
MIN_CENTS, MAX_CENTS = 50, 5_000_000
# shares of the cards each pattern is drawn for
SHARES = {"compromised-card": 0.03, "card-testing": 0.02, "travel-fraud": 0.02,
          "large-purchase": 0.04, "flight": 0.03, "supermarket-burst": 0.04}
TERMINALS = 6                        # compromised terminals, each in its own city
TERMINAL_VICTIMS = (5, 20)           # cards charged per terminal (inclusive)
TERMINAL_WINDOW_MS = 12 * HOUR_MS
TERMINAL_CENTS = (2_000, 30_000)
DRIFT_PAYMENTS, DRIFT_HOURS, DRIFT_STEP = (4, 12), (2.0, 36.0), (1.15, 1.6)
TESTING_PAYMENTS, TESTING_CENTS, TESTING_GAP_MEDIAN_S, TESTING_GAP_SIGMA = (3, 25), (50, 999), 40.0, 1.2
CASHOUT_SHARE, CASHOUT_FACTOR = 0.5, (5.0, 15.0)
TRAVEL_PAYMENTS, TRAVEL_DELAY_MEDIAN_H, TRAVEL_DELAY_SIGMA, TRAVEL_SPREAD_H = (1, 4), 3.0, 1.0, 4.0
LARGE_FACTOR = (4.0, 25.0)
FLIGHT_KMH, AIRPORT_HOURS, STAY_PAYMENTS, STAY_HOURS = 850.0, (1.5, 3.0), (1, 5), 24.0
BURST_PAYMENTS, BURST_MINUTES, BURST_SHOPS, BURST_AMOUNT_MU = (3, 7), (2.0, 15.0), (1, 3), -0.5

ORDINARY = "ordinary"
FRAUD = ("compromised-terminal", "compromised-card", "card-testing", "travel-fraud")
LEGITIMATE = (ORDINARY, "large-purchase", "flight", "supermarket-burst")
PATTERNS = FRAUD + LEGITIMATE


@dataclass(frozen=True)
class Payment:
    card: int
    merchant: int
    amount_cents: int
    event_time: int
    pattern: str


class _World:
    """Cards and merchants of the evaluation (its own geography draw, the real cities)."""

    def __init__(self, rng: np.random.Generator, cards: int):
        n_cities = len(CITIES)
        c_lat = np.array([c[1] for c in CITIES])
        c_lon = np.array([c[2] for c in CITIES])
        self.m_city = np.repeat(np.arange(n_cities), MERCHANTS_PER_CITY)
        self.m_lat, self.m_lon = scatter(rng, c_lat[self.m_city], c_lon[self.m_city], MERCHANT_RADIUS_KM)
        self.city = rng.integers(0, n_cities, cards)
        self.usual = np.clip(np.exp(math.log(USUAL_MEDIAN_CENTS) + USUAL_SIGMA * rng.standard_normal(cards)),
                             *USUAL_RANGE_CENTS)
        self.per_day = np.exp(math.log(PER_DAY_MEDIAN) + PER_DAY_SIGMA * rng.standard_normal(cards))
        self.regular = [self.shops(rng, int(c), REGULAR_SHOPS) for c in self.city]
        self.c_lat, self.c_lon = c_lat, c_lon

    def shops(self, rng, city: int, n: int) -> list[int]:
        return [city * MERCHANTS_PER_CITY + int(j) for j in rng.integers(0, MERCHANTS_PER_CITY, n)]

    def other_city(self, rng, city: int) -> int:
        k = int(rng.integers(0, len(CITIES) - 1))
        return k if k < city else k + 1

    def km(self, a: int, b: int) -> float:
        return float(haversine_km(self.c_lat[a], self.c_lon[a], self.c_lat[b], self.c_lon[b]))


def _cents(x: float) -> int:
    return int(min(MAX_CENTS, max(MIN_CENTS, round(x))))


def _ordinary(rng, w: _World, card: int, start: int, end: int) -> list[Payment]:
    n = int(rng.poisson(w.per_day[card] * (end - start) / DAY_MS))
    times = np.sort(rng.integers(start, end, n))
    out = []
    for t in times.tolist():
        shop = (w.regular[card][int(rng.integers(REGULAR_SHOPS))] if rng.random() < REGULAR_SHARE
                else w.shops(rng, int(w.city[card]), 1)[0])
        out.append(Payment(card, shop, _cents(w.usual[card] * math.exp(AMOUNT_SIGMA * rng.standard_normal())),
                           int(t), ORDINARY))
    return out


def _compromised_card(rng, w, card, start, end) -> list[Payment]:
    n = int(rng.integers(DRIFT_PAYMENTS[0], DRIFT_PAYMENTS[1] + 1))
    span = rng.uniform(*DRIFT_HOURS) * HOUR_MS
    t0 = int(rng.integers(start, max(start + 1, int(end - span))))
    times = np.sort(rng.uniform(t0, t0 + span, n)).astype(np.int64).tolist()
    amount = w.usual[card] * rng.uniform(0.8, 1.5)
    out = []
    for t in times:
        out.append(Payment(card, w.shops(rng, int(w.city[card]), 1)[0], _cents(amount), t, "compromised-card"))
        amount *= rng.uniform(*DRIFT_STEP)
    return out


def _card_testing(rng, w, card, start, end) -> list[Payment]:
    n = int(rng.integers(TESTING_PAYMENTS[0], TESTING_PAYMENTS[1] + 1))
    city = int(rng.integers(len(CITIES)))
    gaps = np.exp(math.log(TESTING_GAP_MEDIAN_S * 1000) + TESTING_GAP_SIGMA * rng.standard_normal(n))
    gaps[0] = 0
    t = float(rng.integers(start, end - 2 * HOUR_MS))
    out = []
    for g in gaps.tolist():
        t += g
        out.append(Payment(card, w.shops(rng, city, 1)[0], int(rng.integers(TESTING_CENTS[0], TESTING_CENTS[1] + 1)),
                           int(t), "card-testing"))
    if rng.random() < CASHOUT_SHARE:
        t += float(np.exp(math.log(TESTING_GAP_MEDIAN_S * 1000) + TESTING_GAP_SIGMA * rng.standard_normal()))
        out.append(Payment(card, w.shops(rng, city, 1)[0], _cents(w.usual[card] * rng.uniform(*CASHOUT_FACTOR)),
                           int(t), "card-testing"))
    return out


def _after_last_home(payments: list[Payment], start: int, end: int, rng) -> int:
    """The owner's last ordinary payment before a random instant (or that instant)."""
    t = int(rng.integers(start, end))
    before = [p.event_time for p in payments if p.event_time <= t and p.pattern == ORDINARY]
    return before[-1] if before else t


def _travel_fraud(rng, w, card, start, end, own: list[Payment]) -> list[Payment]:
    last = _after_last_home(own, start, end - DAY_MS // 2, rng)
    first = last + int(np.exp(math.log(TRAVEL_DELAY_MEDIAN_H * HOUR_MS) + TRAVEL_DELAY_SIGMA * rng.standard_normal()))
    city = w.other_city(rng, int(w.city[card]))
    n = int(rng.integers(TRAVEL_PAYMENTS[0], TRAVEL_PAYMENTS[1] + 1))
    times = [first] + sorted(int(first + rng.uniform(0, TRAVEL_SPREAD_H * HOUR_MS)) for _ in range(n - 1))
    return [Payment(card, w.shops(rng, city, 1)[0],
                    _cents(w.usual[card] * math.exp(AMOUNT_SIGMA * rng.standard_normal())), t, "travel-fraud")
            for t in times]


def _large_purchase(rng, w, card, start, end) -> list[Payment]:
    return [Payment(card, w.regular[card][0] if rng.random() < 0.3 else w.shops(rng, int(w.city[card]), 1)[0],
                    _cents(w.usual[card] * rng.uniform(*LARGE_FACTOR)), int(rng.integers(start, end)),
                    "large-purchase")]


def _flight(rng, w, card, start, end, own: list[Payment]) -> tuple[list[Payment], tuple[int, int]]:
    """The payments abroad, and the (departure, return) window in which the owner pays no one at home."""
    last = _after_last_home(own, start, end - DAY_MS, rng)
    city = w.other_city(rng, int(w.city[card]))
    arrive = last + int((w.km(int(w.city[card]), city) / FLIGHT_KMH + rng.uniform(*AIRPORT_HOURS)) * HOUR_MS)
    n = int(rng.integers(STAY_PAYMENTS[0], STAY_PAYMENTS[1] + 1))
    times = [arrive] + sorted(int(arrive + rng.uniform(0, STAY_HOURS * HOUR_MS)) for _ in range(n - 1))
    pays = [Payment(card, w.shops(rng, city, 1)[0],
                    _cents(w.usual[card] * math.exp(AMOUNT_SIGMA * rng.standard_normal())), t, "flight")
            for t in times]
    back = times[-1] + int((w.km(int(w.city[card]), city) / FLIGHT_KMH + rng.uniform(*AIRPORT_HOURS)) * HOUR_MS)
    return pays, (last + 1, back)


def _supermarket_burst(rng, w, card, start, end) -> list[Payment]:
    n = int(rng.integers(BURST_PAYMENTS[0], BURST_PAYMENTS[1] + 1))
    span = rng.uniform(*BURST_MINUTES) * 60_000
    t0 = int(rng.integers(start, end - int(span)))
    shops = w.shops(rng, int(w.city[card]), int(rng.integers(BURST_SHOPS[0], BURST_SHOPS[1] + 1)))
    times = np.sort(rng.uniform(t0, t0 + span, n)).astype(np.int64).tolist()
    return [Payment(card, shops[int(rng.integers(len(shops)))],
                    _cents(w.usual[card] * math.exp(BURST_AMOUNT_MU + AMOUNT_SIGMA * rng.standard_normal())),
                    t, "supermarket-burst") for t in times]


def draw(seed: int = SEED, cards: int = CARDS, end_ms: int = 0, days: float = DAYS) -> tuple[_World, list[Payment]]:
    """Every payment of the evaluation, in event-time order (ties by card)."""
    if cards < 10 or days < MIN_DAYS:
        raise ValueError(f"The evaluation needs at least 10 cards and {MIN_DAYS:g} days, not {cards} and {days:g}.")
    rng = np.random.default_rng(seed)
    w = _World(rng, cards)
    end = int(end_ms)
    start = end - int(days * DAY_MS)
    chosen = {name: set(np.flatnonzero(rng.random(cards) < share).tolist()) for name, share in SHARES.items()}
    payments: list[Payment] = []
    for card in range(cards):
        own = _ordinary(rng, w, card, start, end)
        extra: list[Payment] = []
        if card in chosen["flight"]:
            abroad, (gone, back) = _flight(rng, w, card, start, end, own)
            own = [p for p in own if not gone <= p.event_time <= back]  # away: no payments at home
            extra += abroad
        if card in chosen["compromised-card"]:
            extra += _compromised_card(rng, w, card, start, end)
        if card in chosen["card-testing"]:
            extra += _card_testing(rng, w, card, start, end)
        if card in chosen["travel-fraud"]:
            extra += _travel_fraud(rng, w, card, start, end, own)
        if card in chosen["large-purchase"]:
            extra += _large_purchase(rng, w, card, start, end)
        if card in chosen["supermarket-burst"]:
            extra += _supermarket_burst(rng, w, card, start, end)
        payments += own + extra
    for city in rng.choice(len(CITIES), size=min(TERMINALS, len(CITIES)), replace=False).tolist():
        locals_ = np.flatnonzero(w.city == city)
        if not len(locals_):
            continue
        terminal = w.shops(rng, int(city), 1)[0]
        t0 = int(rng.integers(start, end - TERMINAL_WINDOW_MS))
        k = min(len(locals_), int(rng.integers(TERMINAL_VICTIMS[0], TERMINAL_VICTIMS[1] + 1)))
        for card in rng.choice(locals_, size=k, replace=False).tolist():
            payments.append(Payment(int(card), terminal, int(rng.integers(TERMINAL_CENTS[0], TERMINAL_CENTS[1] + 1)),
                                    int(rng.integers(t0, t0 + TERMINAL_WINDOW_MS)), "compromised-terminal"))
    payments = [p for p in payments if start <= p.event_time < end]
    payments.sort(key=lambda p: (p.event_time, p.card))
    return w, payments


def evaluation_set(seed: int = SEED, cards: int = CARDS, end_ms: int = 0, days: float = DAYS,
                   prefix: str = "ev") -> tuple[list[dict], list[dict]]:
    """(transactions as the contract's dicts without `produced_at`, labels {txn_id, is_fraud, pattern}).

    Event times end at `end_ms` (the bench passes now, so they pass the job's validation window).
    """
    w, payments = draw(seed, cards, end_ms, days)
    txns, labels = [], []
    for i, p in enumerate(payments):
        txn_id = f"{prefix}-{seed}-{i:07d}"
        txns.append({"txn_id": txn_id, "card_id": f"{prefix}-card-{p.card:05d}",
                     "merchant_id": f"{prefix}-m{p.merchant:05d}", "amount_cents": p.amount_cents,
                     "currency": CITIES[int(w.city[p.card])][3], "lat": round(float(w.m_lat[p.merchant]), 5),
                     "lon": round(float(w.m_lon[p.merchant]), 5), "event_time": p.event_time})
        labels.append({"txn_id": txn_id, "is_fraud": p.pattern in FRAUD, "pattern": p.pattern})
    return txns, labels
