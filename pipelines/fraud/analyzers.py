"""The three fraud analyzers, as plain scoring functions: (state, transaction) -> (score, new state).

Each analyzer keeps a small per-card state (after Grokking Streaming Systems, ch. 4) and scores one
transaction in [0, 1]: 0 is ordinary, 1 is as suspicious as that analyzer can say. They know nothing
of Spark: the fraud job keys the stream by card and hands each card's state and transactions in
event order to these functions, so the logic is tested here without a cluster. `None` is the state
of a card never seen (or expired by the state TTL).

A transaction is any mapping with `amount_cents`, `lat`, `lon` and `event_time` (ms since epoch).
`lat` and `lon` may both be missing (None or NaN: a replayed history without places): then the
proximity analyzer has no opinion (score 0) and the card's last known place stays as it was.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Mapping, NamedTuple


@dataclass(frozen=True)
class Limits:
    """Where each analyzer's score ramps from 0 (at `*_low`) to 1 (at `*_high`).

    The defaults put the aggregator's default threshold (0.7) near the intended limits: about 5x
    the card's average ticket, an implied speed of about 900 km/h, 6 transactions in a minute or
    2 within 5 seconds.
    """
    # average ticket: amount / running average of the card
    ticket_min_history: int = 3          # fewer past transactions: no opinion yet
    ticket_ratio_low: float = 2.5
    ticket_ratio_high: float = 6.0
    ticket_history_cap: int = 50         # after this many, the average becomes a moving one
    # windowed proximity: implied speed between this and the card's previous transaction
    proximity_window_ms: int = 6 * 3600 * 1000
    speed_low_kmh: float = 450.0
    speed_high_kmh: float = 1050.0
    min_distance_km: float = 50.0        # closer than this is never "too far", whatever the time
    min_gap_ms: int = 60_000             # two payments in the same minute count as a minute apart
    # windowed transaction count: transactions of the card within the window, this one included
    velocity_window_ms: int = 60_000
    velocity_low: int = 3
    velocity_high: int = 7
    # ... and a short window, so a burst is caught from its second payment, not its seventh
    velocity_burst_ms: int = 5_000
    velocity_burst_low: int = 1
    velocity_burst_high: int = 2
    velocity_keep: int = 32              # at most this many recent times are kept per card


DEFAULT_LIMITS = Limits()


def limits_text(limits: Limits) -> str:
    """The limits as the JVM analyzers read them (LiveProfiles.Limits.parse): tab-separated key=value."""
    return "\t".join(f"{k}={v}" for k, v in asdict(limits).items())


def ramp(x: float, low: float, high: float) -> float:
    """0 at or below `low`, 1 at or above `high`, linear in between."""
    if x <= low:
        return 0.0
    if x >= high:
        return 1.0
    return (x - low) / (high - low)


# ---------------------------------------------------------------- average ticket

class TicketState(NamedTuple):
    count: int
    mean: float  # cents


def avg_ticket(state: TicketState | None, txn: Mapping, limits: Limits = DEFAULT_LIMITS
               ) -> tuple[float, TicketState]:
    """Score an amount far above the card's running average, then fold it into the average.

    The amount is folded in clipped at `ticket_ratio_low` x the average, so one spike does not
    inflate the profile the next spike is judged against, while a real rise in spending still
    moves the average up step by step.
    """
    amount = float(txn["amount_cents"])
    if state is None or state.count == 0:
        return 0.0, TicketState(1, amount)
    score = ramp(amount / state.mean, limits.ticket_ratio_low, limits.ticket_ratio_high) \
        if state.count >= limits.ticket_min_history and state.mean > 0 else 0.0
    folded = min(amount, state.mean * limits.ticket_ratio_low) if state.count >= limits.ticket_min_history \
        else amount
    weight = min(state.count, limits.ticket_history_cap)
    return score, TicketState(state.count + 1, (state.mean * weight + folded) / (weight + 1))


# ---------------------------------------------------------------- windowed proximity

class ProximityState(NamedTuple):
    lat: float
    lon: float
    event_time: int


def haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * 6371.0088 * math.asin(min(1.0, math.sqrt(a)))


def implied_speed_kmh(distance_km: float, gap_ms: int, limits: Limits = DEFAULT_LIMITS) -> float:
    hours = max(abs(gap_ms), limits.min_gap_ms) / 3_600_000
    return distance_km / hours


def has_place(txn: Mapping) -> bool:
    """Whether a transaction has coordinates (lat and lon, neither None nor NaN)."""
    lat, lon = txn.get("lat"), txn.get("lon")
    return lat is not None and lon is not None and not (math.isnan(lat) or math.isnan(lon))


def proximity(state: ProximityState | None, txn: Mapping, limits: Limits = DEFAULT_LIMITS
              ) -> tuple[float, ProximityState | None]:
    """Score two transactions too far apart for the time between them (implied speed).

    Only a previous transaction within the window counts; an out-of-order one is compared by the
    absolute gap. The state keeps the latest transaction in event time, so a late event does not
    move the card's last known place backwards. A transaction without a place has no opinion
    (0) and leaves the state as it was (None stays None).
    """
    if not has_place(txn):
        return 0.0, state
    here = ProximityState(float(txn["lat"]), float(txn["lon"]), int(txn["event_time"]))
    if state is None:
        return 0.0, here
    gap = here.event_time - state.event_time
    score = 0.0
    if abs(gap) <= limits.proximity_window_ms:
        distance = haversine_km(state.lat, state.lon, here.lat, here.lon)
        if distance >= limits.min_distance_km:
            score = ramp(implied_speed_kmh(distance, gap, limits), limits.speed_low_kmh, limits.speed_high_kmh)
    return score, (here if gap >= 0 else state)


# ---------------------------------------------------------------- windowed transaction count

class VelocityState(NamedTuple):
    times: tuple[int, ...]  # recent event times, ascending


def velocity(state: VelocityState | None, txn: Mapping, limits: Limits = DEFAULT_LIMITS
             ) -> tuple[float, VelocityState]:
    """Score too many transactions of one card within a short event-time window.

    Two windows, the stronger one wins: a minute (several payments) and a few seconds (two
    payments of one card seconds apart is already a burst: card testing, caught early).
    """
    t = int(txn["event_time"])
    times = sorted((state.times if state else ()) + (t,))
    newest = times[-1]
    recent = [x for x in times if x > newest - limits.velocity_window_ms][-limits.velocity_keep:]

    def count(window_ms: int) -> int:
        return sum(1 for x in times if t - window_ms < x <= t)

    score = max(ramp(count(limits.velocity_window_ms), limits.velocity_low, limits.velocity_high),
                ramp(count(limits.velocity_burst_ms), limits.velocity_burst_low, limits.velocity_burst_high))
    return score, VelocityState(tuple(recent))


# ---------------------------------------------------------------- all three, one card

@dataclass(frozen=True)
class CardProfile:
    """Everything the analyzers remember about one card (the fraud job's per-card state)."""
    ticket: TicketState | None = None
    place: ProximityState | None = None
    recent: VelocityState | None = None
    last_seen: int = 0  # wall clock ms of the last transaction; for the TTL and the dashboard


ANALYZER_FUNCTIONS = {"avg_ticket": avg_ticket, "proximity": proximity, "velocity": velocity}


def score_transaction(profile: CardProfile | None, txn: Mapping, limits: Limits = DEFAULT_LIMITS
                      ) -> tuple[dict[str, float], CardProfile]:
    """Run the three analyzers on one transaction: ({analyzer: score}, the card's new profile)."""
    profile = profile or CardProfile()
    s1, ticket = avg_ticket(profile.ticket, txn, limits)
    s2, place = proximity(profile.place, txn, limits)
    s3, recent = velocity(profile.recent, txn, limits)
    new = replace(profile, ticket=ticket, place=place, recent=recent)
    return {"avg_ticket": s1, "proximity": s2, "velocity": s3}, new
