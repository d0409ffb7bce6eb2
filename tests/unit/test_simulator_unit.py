"""The simulator's plain parts, no broker: the stream, its patterns, partitioning, commands, the CLI.

Stated tolerances: shares are checked on 40,000 events against about 3 standard deviations of
their sampling error (fraud +-0.012, because card-testing bursts of ~13 come in clumps; late and
bad +-0.004).
"""
from __future__ import annotations

import base64
import collections
import json
import os
import random
import subprocess
import sys
import time

import pytest
from kafka.partitioner.default import murmur2
from kafka.record.util import encode_varint

from infra.config import ROOT
from infra.contracts import LABEL_FIELDS, TRANSACTION_FIELDS, dead_letter_reason
from infra.partitioner import murmur2_many, partitions_for
from controlplane import commands
from pipelines.fraud.aggregator import aggregate
from pipelines.fraud.analyzers import score_transaction
from simulator import patterns as P
from simulator.control import Control, apply
from simulator.producer import _varint
from simulator.runner import Simulator
from simulator.stream import Stream

T0 = 1_700_000_000_000
FRAUD = set(P.FRAUD_PATTERNS)


def make(count=5000, **kw):
    kw.setdefault("start_ms", T0)
    return list(Stream(kw.pop("seed", 11), kw.pop("rate", None), count=count, **kw))


def fingerprint(events):
    return [(e.txn_id, e.key, e.value(0), e.label, e.emit_ms) for e in events]


# ------------------------------------------------------------------ Kafka's own encodings

def test_partitions_match_kafkas_default_partitioner():
    rnd = random.Random(3)
    keys = [bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 40))) for _ in range(3000)]
    keys += [b"c%07d" % i for i in range(500)] + [b"c%07dr%d" % (i, i % 3) for i in range(500)]
    hashes = murmur2_many(keys)
    assert [int(h) & 0x7FFFFFFF for h in hashes] == [murmur2(k) & 0x7FFFFFFF for k in keys]
    assert partitions_for(keys, 7).tolist() == [(murmur2(k) & 0x7FFFFFFF) % 7 for k in keys]


def test_varints_match_kafkas_record_encoding():
    for value in [0, 1, 63, 64, 127, 128, 300, 16_383, 16_384, 32_767, 32_768, 1_000_000, 2**40]:
        out = bytearray()
        encode_varint(value, out.append)
        assert _varint(value) == bytes(out)


# ------------------------------------------------------------------ the stream

def test_the_same_seed_gives_the_same_stream_and_another_seed_does_not():
    a = make(4000, seed=5, fraud_rate=0.1, late_rate=0.05, bad_rate=0.05, late_lag_ms=500)
    b = make(4000, seed=5, fraud_rate=0.1, late_rate=0.05, bad_rate=0.05, late_lag_ms=500)
    c = make(4000, seed=6, fraud_rate=0.1, late_rate=0.05, bad_rate=0.05, late_lag_ms=500)
    assert fingerprint(a) == fingerprint(b)
    assert [e.txn_id for e in a] != [e.txn_id for e in c]
    assert [e.value(0) for e in a][100:200] != [e.value(0) for e in c][100:200]


def test_count_gives_exactly_that_many_messages_with_unique_ids():
    for count in (1, 17, 5000):
        events = make(count, fraud_rate=0.3, late_rate=0.1, bad_rate=0.1, late_lag_ms=60_000)
        assert len(events) == count
        assert len({e.txn_id for e in events}) == count


def test_valid_transactions_and_labels_follow_the_contracts():
    events = make(3000, fraud_rate=0.1, late_rate=0.05, late_lag_ms=1000)
    for e in events:
        doc = json.loads(e.value(T0 + 5))
        assert list(doc) == list(TRANSACTION_FIELDS)
        for name, kind in TRANSACTION_FIELDS.items():
            assert isinstance(doc[name], kind), (name, doc)
        assert doc["produced_at"] == T0 + 5 and doc["event_time"] == e.event_time
        assert e.key == doc["card_id"].encode() and doc["txn_id"] == e.txn_id
        assert dead_letter_reason(e.value(T0)) is None
        label = json.loads(e.label)
        assert set(label) == set(LABEL_FIELDS) and label["txn_id"] == e.txn_id
        assert label["is_fraud"] == (e.pattern in FRAUD) and label["pattern"] == e.pattern
        assert label["is_late"] == e.late


def test_fraud_late_and_bad_shares_match_the_rates():
    events = make(40_000, rate=50, fraud_rate=0.1, late_rate=0.05, bad_rate=0.05, late_lag_ms=2000)
    n = len(events)
    patterns = collections.Counter(e.pattern for e in events)
    fraud = sum(patterns[p] for p in FRAUD) / n
    bad = sum(v for p, v in patterns.items() if p.startswith("bad:")) / n
    late = sum(e.late for e in events) / n
    assert abs(fraud - 0.1) <= 0.012, patterns
    assert abs(late - 0.05) <= 0.004
    assert abs(bad - 0.05) <= 0.004
    assert all(patterns[p] > 100 for p in FRAUD), patterns
    assert {p for p in patterns if p.startswith("bad:")} == {f"bad:{k}" for k in P.BAD_KINDS}
    assert not any(e.late for e in events if e.pattern != P.NORMAL)


def test_no_fraud_when_the_rate_is_zero():
    events = make(5000, fraud_rate=0.0, late_rate=0.0, bad_rate=0.0)
    assert {e.pattern for e in events} == {P.NORMAL} and not any(e.late for e in events)


def test_late_events_arrive_behind_the_stream_by_at_least_the_lag():
    lag = 2000
    events = make(20_000, rate=1000, fraud_rate=0.02, late_rate=0.05, late_lag_ms=lag)
    newest, behind = 0, []
    tail = events[-200:]  # what is still held back at the end is sent at once
    for e in events:
        if e.late and e not in tail:
            behind.append(newest - e.event_time)
        newest = max(newest, e.event_time)
    assert len(behind) > 500
    assert min(behind) >= lag * 0.98 and max(behind) <= 2 * lag * 1.02 + 50


def test_every_malformed_message_is_a_dead_letter_of_its_kind():
    """Drawn at random from the corpus (`BAD_REASONS`; tests/unit/test_validation.py covers each kind
    in depth): each is caught with its kind's reason, and its label finds its dead letter."""
    events = make(6000, fraud_rate=0.0, bad_rate=0.3)
    seen = collections.Counter()
    for e in events:
        if not e.pattern.startswith("bad:"):
            continue
        kind = e.pattern[4:]
        seen[kind] += 1
        reason = dead_letter_reason(e.payload, now_ms=e.emit_ms)
        assert reason is not None and P.BAD_REASONS[kind] in reason, (kind, reason, e.payload[:200])
        label = json.loads(e.label)
        assert label["txn_id"] == e.txn_id and label["is_fraud"] is False and label["is_late"] is False
        has_id = P.has_txn_id(e.payload, e.txn_id)
        assert ("raw" in label) == (not has_id), kind
        if "raw" in label:
            raw = (base64.b64decode(label["raw"]) if label.get("raw_encoding") == "base64"
                   else label["raw"].encode())
            assert raw == e.payload, kind
    assert sum(seen.values()) > 1500 and set(seen) == set(P.BAD_KINDS)  # seeded: every kind drawn


def test_each_pattern_is_caught_by_its_analyzer_and_ordinary_traffic_by_none():
    """The detector's own scoring functions, fed per card in the order Kafka delivers."""
    events = make(20_000, rate=20, fraud_rate=0.05, late_rate=0.05, late_lag_ms=30_000)
    profiles, position = {}, collections.Counter()
    flagged, total, wrong = collections.Counter(), collections.Counter(), collections.Counter()
    meant = {P.SPIKE: "avg_ticket", P.TRAVEL: "proximity", P.TESTING: "velocity"}
    for e in events:
        txn = json.loads(e.value(0))
        scores, profiles[txn["card_id"]] = score_transaction(profiles.get(txn["card_id"]), txn)
        _, is_fraud = aggregate(scores, 0.7)
        key = e.pattern
        if e.pattern == P.TESTING:
            position[txn["card_id"]] += 1
            key = "testing-early" if position[txn["card_id"]] <= 5 else "testing-6th-on"
        total[key] += 1
        flagged[key] += is_fraud
        others = [a for a, v in scores.items() if v >= 0.7 and a != meant.get(e.pattern)]
        warm = e.event_time >= events[0].event_time + P.TRAVEL_MIN_GAP_MS  # older home payments exist
        wrong[key] += bool(others) and e.pattern in meant and warm
    assert total[P.NORMAL] > 15_000 and total[P.SPIKE] > 100 and total[P.TRAVEL] > 100
    assert flagged[P.NORMAL] <= 0.001 * total[P.NORMAL]
    assert flagged[P.SPIKE] >= 0.98 * total[P.SPIKE]
    assert flagged[P.TRAVEL] >= 0.98 * total[P.TRAVEL]
    assert flagged["testing-6th-on"] >= 0.98 * total["testing-6th-on"] > 0
    assert sum(wrong.values()) == 0, wrong


# ------------------------------------------------------------------ commands

def _command(kind, **params):
    return commands.Command(1, kind, "simulator", params, 0)


def test_commands_change_the_running_stream():
    stream = Stream(1, 100, start_ms=T0, fraud_rate=0.0, late_rate=0.0, late_lag_ms=100)
    sim = Simulator(stream, producer=None, topic="t", labels_topic="l", rate=100)
    assert apply(sim, _command("pause")) == "paused" and sim.paused
    assert apply(sim, _command("resume")).startswith("resumed") and not sim.paused
    cards = len(stream.cards)
    assert "rate 2000/s" in apply(sim, _command("set-rate", rate=2000))
    assert stream.rate == 2000 and len(stream.cards) > cards
    apply(sim, _command("set-fraud-rate", fraud_rate=0.25))
    apply(sim, _command("set-late-rate", late_rate=0.1))
    assert (stream.fraud_rate, stream.late_rate) == (0.25, 0.1)
    apply(sim, _command("set-fraud-rate", fraud_rate=0.0))
    apply(sim, _command("set-late-rate", late_rate=0.0))
    apply(sim, _command("bad-input", count=7))
    apply(sim, _command("late-burst", count=9))
    events = stream.take(2000)
    assert sum(e.pattern.startswith("bad:") for e in events) == 7
    assert sum(e.late for e in events) == 9
    for bad in (_command("set-rate", rate=0), _command("set-rate"), _command("late-burst", count=0),
                _command("set-fraud-rate", fraud_rate=3), _command("bad-input", count="many")):
        with pytest.raises(ValueError):
            apply(sim, bad)


def test_control_claims_its_commands_from_the_store_once(store):
    stream = Stream(1, 100, start_ms=T0)
    sim = Simulator(stream, producer=None, topic="t", labels_topic="l", rate=100)
    ok = commands.issue(store, "bad-input", "simulator", count=3)
    failed = commands.issue(store, "set-rate", "simulator", rate=0)  # in the catalogue's range, not the simulator's
    other = commands.issue(store, "crash", "usage")
    control = Control(store)
    assert [(i, o) for i, o, _ in control.poll(sim)] == [(ok, True), (failed, False)]
    assert control.poll(sim) == []
    assert store["commands"].get(ok)["status"] == "done"
    row = store["commands"].get(failed)
    assert row["status"] == "failed" and "positive" in row["result"]
    assert store["commands"].get(other)["status"] == "pending"
    assert stream.forced_bad == 3


# ------------------------------------------------------------------ the command line

@pytest.mark.parametrize("args, says", [
    (["--rate", "0"], "positive"),
    (["--rate", "-5"], "positive"),
    (["--rate", "fast"], "positive"),
    (["--count", "0"], "positive"),
    (["--fraud-rate", "1.5"], "between 0 and 1"),
    (["--fraud-rate", "0.6", "--bad-rate", "0.5"], "at most 0.8"),
    (["--late-rate", "0.99", "--fraud-rate", "0.1"], "late rate"),
    (["--no-such-option"], "unrecognized arguments"),
])
def test_bad_arguments_get_one_sentence_and_a_nonzero_exit(args, says):
    proc = subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0].lower() and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""


def test_an_unreachable_broker_is_one_sentence_within_seconds():
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "simulator", "--bootstrap", "127.0.0.1:9", "--count", "5"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1 and time.monotonic() - started < 15
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Cannot reach the Kafka broker at 127.0.0.1:9" in lines[0], proc.stderr
