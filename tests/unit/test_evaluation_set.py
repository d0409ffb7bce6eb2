"""The evaluation set (simulator/evaluation.py): seeded, valid, drawn by its own rules.

Its point is independence from the analyzers, so that is checked first: the module imports
nothing from the fraud job (nor the live simulator's patterns, which are shaped for it).
"""
from __future__ import annotations

import ast
import json
from collections import Counter

import pytest

from infra.config import ROOT
from simulator import evaluation as E
from infra.contracts import dead_letter_reason
from simulator.population import CITIES, haversine_km

END = 1_900_000_000_000


@pytest.fixture(scope="module")
def drawn():
    return E.evaluation_set(seed=7, cards=600, end_ms=END)


def test_the_module_imports_nothing_from_the_analyzers_or_the_patterns_shaped_for_them():
    tree = ast.parse((ROOT / "simulator" / "evaluation.py").read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [n for n in names if n.startswith("pipelines") or n == "simulator.patterns"], names


def test_same_seed_same_set_other_seed_other_set(drawn):
    assert E.evaluation_set(seed=7, cards=600, end_ms=END) == drawn
    assert E.evaluation_set(seed=8, cards=600, end_ms=END)[0] != drawn[0]


def test_labels_say_fraud_for_the_fraud_patterns_and_every_pattern_occurs():
    txns, labels = E.evaluation_set(end_ms=END)
    counts = Counter(l["pattern"] for l in labels)
    assert set(counts) == set(E.PATTERNS)
    assert all(l["is_fraud"] == (l["pattern"] in E.FRAUD) for l in labels)
    assert [t["txn_id"] for t in txns] == [l["txn_id"] for l in labels]
    assert len({t["txn_id"] for t in txns}) == len(txns)
    assert 0.02 < sum(l["is_fraud"] for l in labels) / len(labels) < 0.15


def test_every_transaction_is_valid_in_event_time_order_inside_the_span(drawn):
    txns, _ = drawn
    times = [t["event_time"] for t in txns]
    assert times == sorted(times)
    assert END - E.DAYS * E.DAY_MS <= times[0] and times[-1] < END
    for t in txns[:2000]:
        payload = json.dumps({**t, "produced_at": END}).encode()
        assert dead_letter_reason(payload, now_ms=END) is None, t


def test_card_testing_amounts_are_small_and_flights_take_at_least_the_flight(drawn):
    txns, labels = drawn
    by_card: dict[str, list] = {}
    for t, l in zip(txns, labels):
        by_card.setdefault(t["card_id"], []).append((t, l["pattern"]))
    tested = [t for t, l in zip(txns, labels) if l["pattern"] == "card-testing"]
    assert tested and sum(E.TESTING_CENTS[0] <= t["amount_cents"] <= E.TESTING_CENTS[1] for t in tested) \
        >= 0.8 * len(tested)  # the rest are cash-outs
    flights = 0
    for card, pays in by_card.items():
        for k, (t, pattern) in enumerate(pays):
            if pattern != "flight" or k == 0 or pays[k - 1][1] == "flight":
                continue
            before = pays[k - 1][0]  # the payment before landing
            km = float(haversine_km(before["lat"], before["lon"], t["lat"], t["lon"]))
            if pays[k - 1][1] == "ordinary":
                flights += 1
                # great-circle distance between the shops, less both cities' radii, at 850 km/h at most
                hours = (t["event_time"] - before["event_time"]) / E.HOUR_MS
                assert hours >= (km - 2 * E.MERCHANT_RADIUS_KM) / E.FLIGHT_KMH
    assert flights


def test_the_set_refuses_what_it_cannot_draw():
    with pytest.raises(ValueError, match="at least 10 cards"):
        E.evaluation_set(cards=3, end_ms=END)
    with pytest.raises(ValueError, match="days"):
        E.evaluation_set(days=0.5, end_ms=END)


def test_currencies_are_the_cards_home_currency(drawn):
    txns, _ = drawn
    currencies = {c[3] for c in CITIES}
    per_card = {}
    for t in txns:
        assert t["currency"] in currencies
        assert per_card.setdefault(t["card_id"], t["currency"]) == t["currency"]
