"""The fraud job's per-card state: the profile codec and the scoring of one bucket of cards (pure).

Spark's `transformWithStateInPandas` keeps a map per card bucket, one entry per card; this module
turns an entry into an analyzer profile and back, and runs the analyzers
(`pipelines.fraud.analyzers`) over a bucket's new transactions, card by card in event order. No
Spark here: it is tested on plain pandas frames.
"""
from __future__ import annotations

from dataclasses import replace

from infra.contracts import ANALYZERS
from pipelines.fraud.analyzers import (CardProfile, ProximityState, TicketState, VelocityState,
                                       score_transaction)

# What the stateful operator emits per transaction, before the aggregator and decided_at.
SCORED_FIELDS = {
    "txn_id": "string", "card_id": "string", "merchant_id": "string", "amount_cents": "long",
    "event_time": "long", "produced_at": "long",
    **{f"score_{name}": "double" for name in ANALYZERS},
    "is_late": "boolean",
    # the card's profile right after this transaction (for the real-time path's snapshot)
    "p_count": "long", "p_mean": "double", "p_lat": "double", "p_lon": "double",
    "p_time": "long", "p_times": "string",
}
SCORED_DDL = ", ".join(f"{name} {kind}" for name, kind in SCORED_FIELDS.items())
TXN_COLUMNS = ("txn_id", "card_id", "merchant_id", "amount_cents", "lat", "lon", "event_time",
               "produced_at")
PROFILE_DDL = ("count long, mean double, lat double, lon double, place_time long, times string, "
               "last_seen long")
CARD_KEY_DDL = "card_id string"  # the map state's key under the bucket: one entry per card
# what the state of a checkpoint holds, per processor (FRAUD_PROCESSOR), recorded beside it
# (pipelines.fraud.job.check_layout): the pandas processor's map entry per card under its bucket,
# or the JVM processor's value per card (keyed by card); "+history": then the event-time windows
# per card and per terminal (pipelines/fraud/features.py), two more stateful operators
STATE_LAYOUTS = {"python": "card-map+history", "jvm": "card-value+history"}

def profile_to_row(p) -> tuple:
    """CardProfile -> the map state's value tuple (PROFILE_DDL); None fields stay None."""
    return (p.ticket.count if p.ticket else None, p.ticket.mean if p.ticket else None,
            p.place.lat if p.place else None, p.place.lon if p.place else None,
            p.place.event_time if p.place else None,
            ",".join(map(str, p.recent.times)) if p.recent else "", p.last_seen)


def profile_from_row(row) -> CardProfile:
    count, mean, lat, lon, place_time, times, last_seen = row
    return CardProfile(
        ticket=TicketState(int(count), float(mean)) if count is not None else None,
        place=ProximityState(float(lat), float(lon), int(place_time)) if place_time is not None else None,
        recent=VelocityState(tuple(int(x) for x in times.split(",") if x)) if times else None,
        last_seen=int(last_seen or 0))


def score_cards(stored: dict, batch, watermark: int, now: int, limits) -> tuple[dict, dict]:
    """Score a bucket's new transactions, card by card in event order (pure).

    `stored`: the profile row (PROFILE_DDL) of each card of the batch that has one, by card id;
    `batch`: a pandas frame of TXN_COLUMNS + offset. Returns the output columns (SCORED_FIELDS) and
    the new profile row of every card the batch touched: all a batch reads and writes are its own
    cards, whatever the state holds.

    Why buckets at all: Spark calls the Python processor once per key and batch, about a
    millisecond on two cores, and a card pays about once a minute, so keyed by card nearly every
    row would be its own call. Keyed by bucket, with a map entry per card under it, a bucket costs
    one call per batch and each card one state read and one write.
    """
    batch = batch.sort_values(["card_id", "event_time", "offset"], kind="stable")
    out = {name: [] for name in SCORED_FIELDS}
    updated: dict = {}
    columns = [batch[c].tolist() for c in TXN_COLUMNS]
    card, profile = None, None
    for values in zip(*columns):
        txn = dict(zip(TXN_COLUMNS, values))
        if txn["card_id"] != card:
            if card is not None:
                updated[card] = profile_to_row(replace(profile, last_seen=now))
            card = txn["card_id"]
            row = stored.get(card)
            profile = profile_from_row(row) if row is not None else None
        scores, profile = score_transaction(profile, txn, limits)
        p = profile_to_row(profile)
        for name, value in (("txn_id", txn["txn_id"]), ("card_id", card), ("merchant_id", txn["merchant_id"]),
                            ("amount_cents", int(txn["amount_cents"])), ("event_time", int(txn["event_time"])),
                            ("produced_at", int(txn["produced_at"])),
                            *((f"score_{a}", float(scores[a])) for a in ANALYZERS),
                            ("is_late", bool(watermark > 0 and txn["event_time"] < watermark)),
                            ("p_count", p[0]), ("p_mean", p[1]), ("p_lat", p[2]), ("p_lon", p[3]),
                            ("p_time", p[4]), ("p_times", p[5])):
            out[name].append(value)
    if card is not None:
        updated[card] = profile_to_row(replace(profile, last_seen=now))
    return out, updated
