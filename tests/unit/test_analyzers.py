"""Unit tests of the three analyzers and the aggregator: plain Python, no Spark, no Kafka."""
from __future__ import annotations

import pytest

from pipelines.fraud.aggregator import aggregate
from pipelines.fraud.analyzers import (DEFAULT_LIMITS, CardProfile, Limits, ProximityState, TicketState,
                                 VelocityState, avg_ticket, haversine_km, proximity, ramp,
                                 score_transaction, velocity)

T0 = 1_700_000_000_000
PARIS, NEW_YORK = (48.8566, 2.3522), (40.7128, -74.0060)


def txn(amount=2_000, where=PARIS, t=T0, **extra):
    return {"amount_cents": amount, "lat": where[0], "lon": where[1], "event_time": t, **extra}


def run(fn, txns, state=None):
    scores = []
    for t in txns:
        score, state = fn(state, t)
        assert 0.0 <= score <= 1.0
        scores.append(score)
    return scores, state


def test_ramp_is_clamped_and_linear():
    assert ramp(1, 2, 4) == 0.0 and ramp(5, 2, 4) == 1.0 and ramp(3, 2, 4) == 0.5


def test_avg_ticket_flags_a_spike_after_some_history():
    scores, state = run(avg_ticket, [txn(2_000 + 100 * i, t=T0 + i) for i in range(10)])
    assert max(scores) == 0.0
    assert state.count == 10 and 2_000 < state.mean < 3_000
    spike, _ = avg_ticket(state, txn(30_000))
    assert spike == 1.0
    modest, _ = avg_ticket(state, txn(4_000))
    assert modest == 0.0


def test_avg_ticket_has_no_opinion_without_history():
    scores, _ = run(avg_ticket, [txn(1_000), txn(50_000)])
    assert scores == [0.0, 0.0]


def test_avg_ticket_spike_does_not_inflate_the_profile():
    state = TicketState(10, 2_000.0)
    _, after = avg_ticket(state, txn(1_000_000))
    assert after.mean <= 2_000 * DEFAULT_LIMITS.ticket_ratio_low
    second, _ = avg_ticket(after, txn(1_000_000))
    assert second == 1.0


def test_haversine_paris_new_york():
    assert haversine_km(*PARIS, *NEW_YORK) == pytest.approx(5837, rel=0.01)


def test_proximity_flags_impossible_travel():
    _, state = proximity(None, txn(where=PARIS, t=T0))
    score, _ = proximity(state, txn(where=NEW_YORK, t=T0 + 30 * 60_000))  # 5,800 km in 30 min
    assert score == 1.0


def test_proximity_allows_a_flight():
    _, state = proximity(None, txn(where=PARIS, t=T0))
    score, _ = proximity(state, txn(where=NEW_YORK, t=T0 + 9 * 3600_000))  # ~650 km/h
    assert score < 0.7


def test_proximity_ignores_nearby_jitter_even_milliseconds_apart():
    _, state = proximity(None, txn(where=PARIS, t=T0))
    score, _ = proximity(state, txn(where=(48.9, 2.4), t=T0 + 5))
    assert score == 0.0


def test_proximity_window_forgets_old_places():
    state = ProximityState(*PARIS, T0)
    score, _ = proximity(state, txn(where=NEW_YORK, t=T0 + DEFAULT_LIMITS.proximity_window_ms + 1))
    assert score == 0.0


def test_proximity_late_event_is_scored_but_keeps_latest_place():
    state = ProximityState(*PARIS, T0)
    score, after = proximity(state, txn(where=NEW_YORK, t=T0 - 10 * 60_000))
    assert score == 1.0
    assert after == state


def test_velocity_flags_a_burst_but_not_a_steady_card():
    steady, _ = run(velocity, [txn(t=T0 + i * 120_000) for i in range(20)])
    assert max(steady) == 0.0
    burst, state = run(velocity, [txn(t=T0 + i * 2_000) for i in range(10)])
    assert burst[0] == 0.0 and burst[1:] == [1.0] * 9  # caught from the second payment on
    assert len(state.times) <= DEFAULT_LIMITS.velocity_keep


def test_velocity_minute_window_counts_several_payments():
    spaced = [txn(t=T0 + i * 8_000) for i in range(8)]  # never two within 5 s
    scores, _ = run(velocity, spaced)
    assert scores[:DEFAULT_LIMITS.velocity_low] == [0.0] * DEFAULT_LIMITS.velocity_low
    assert scores[DEFAULT_LIMITS.velocity_high - 1] == 1.0


def test_velocity_window_slides():
    state = VelocityState(tuple(T0 + i for i in range(10)))
    score, after = velocity(state, txn(t=T0 + DEFAULT_LIMITS.velocity_window_ms + 100))
    assert score == 0.0
    assert after.times == (T0 + DEFAULT_LIMITS.velocity_window_ms + 100,)


def test_velocity_out_of_order_event_counts_only_earlier_neighbours():
    score, after = velocity(VelocityState((T0 + 3_000,)), txn(t=T0))
    assert score == 0.0 and after.times == (T0, T0 + 3_000)
    score, _ = velocity(VelocityState((T0, T0 + 3_000)), txn(t=T0 + 1_000))
    assert score == 1.0


def test_limits_are_configurable():
    strict = Limits(velocity_low=1, velocity_high=2)
    score, _ = velocity(VelocityState((T0,)), txn(t=T0 + 30_000), strict)
    assert score == 1.0


def test_score_transaction_runs_all_three_and_keeps_a_profile():
    profile = None
    for i in range(5):
        scores, profile = score_transaction(profile, txn(t=T0 + i * 600_000))
    assert isinstance(profile, CardProfile)
    assert set(scores) == {"avg_ticket", "proximity", "velocity"}
    scores, _ = score_transaction(profile, txn(amount=100_000, where=NEW_YORK, t=T0 + 5 * 600_000 + 1))
    assert scores["avg_ticket"] == 1.0 and scores["proximity"] == 1.0


def test_aggregate_takes_the_strongest_signal_and_applies_the_threshold():
    score, is_fraud = aggregate({"avg_ticket": 0.1, "proximity": 0.9, "velocity": 0.0}, threshold=0.7)
    assert is_fraud and score >= 0.9
    score, is_fraud = aggregate({"avg_ticket": 0.5, "proximity": 0.5, "velocity": 0.0}, threshold=0.7)
    assert not is_fraud and 0.5 <= score < 0.7
    _, is_fraud = aggregate({"avg_ticket": 0.5, "proximity": 0.5, "velocity": 0.0}, threshold=0.5)
    assert is_fraud


def test_aggregate_rejects_a_bad_threshold():
    with pytest.raises(ValueError, match="threshold"):
        aggregate({"avg_ticket": 0.0}, threshold=1.5)
