"""Event-time windows on real Kafka and Spark equal a plain-Python recomputation; late events are
counted, never dropped silently, and every batch the windows sink applied is in the sink ledger
with its Kafka range."""
from __future__ import annotations

import dataclasses
import json
from collections import Counter, defaultdict

from controlplane import fencing, ledger
from infra import kafka_client
from pipelines.usage import windows
from bench.harness.jobs import decision, produce

BASE = 1_700_000_040_000  # a whole minute
S = 1000
GAP_S, WATERMARK_S = 60, 30


def events(phase: int, offsets_s: list[int], cards: int = 4, late: bool = False) -> list[dict]:
    out = []
    for k, off in enumerate(offsets_s):
        d = decision(phase * 1000 + k, k % 3 == 0, event_time=BASE + off * S, card=f"card-{k % cards}")
        out.append(dict(d, _late=late))
    return out


def expected(on_time: list[dict], late: list[dict]):
    fixed = Counter()
    for e in on_time:
        t, f = e["event_time"], int(e["is_fraud"])
        m = t - t % 60_000
        fixed[("tumbling", "all", m, m + 60_000, "n")] += 1
        fixed[("tumbling", "all", m, m + 60_000, "f")] += f
        for k in range(5):
            s = m - k * 60_000
            fixed[("sliding", "all", s, s + 300_000, "n")] += 1
            fixed[("sliding", "all", s, s + 300_000, "f")] += f
    rows = {(kind, key, s, e): (fixed[(kind, key, s, e, "n")], fixed[(kind, key, s, e, "f")])
            for kind, key, s, e, what in fixed if what == "n"}
    per_card = defaultdict(list)
    for e in on_time:
        per_card[e["card_id"]].append((e["event_time"], int(e["is_fraud"])))
    for card, evs in per_card.items():
        evs.sort()
        start, last, n, f = evs[0][0], evs[0][0], 0, 0
        for t, fr in evs:
            if t >= last + GAP_S * S:
                rows[("session", card, start, last + GAP_S * S)] = (n, f)
                start, n, f = t, 0, 0
            last, n, f = t, n + 1, f + fr
        rows[("session", card, start, last + GAP_S * S)] = (n, f)
    lates = Counter()
    for e in late:
        t = e["event_time"]
        m = t - t % 60_000
        lates[("tumbling", m)] += 1
        lates[("session", m)] += 1
        for k in range(5):
            lates[("sliding", m - k * 60_000)] += 1
    return rows, dict(lates)


def test_windows_match_a_python_recomputation_and_count_late_events(kafka, spark, topic, store, settings,
                                                                   tmp_path):
    name = topic("decisions-windows")
    s = dataclasses.replace(settings, watermark_seconds=WATERMARK_S, session_gap_seconds=GAP_S)
    epoch = fencing.take_lease(store, "usage")
    query = windows.start_query(spark, s, epoch, store, checkpoint=str(tmp_path / "cp"), topic=name,
                                trigger_seconds=0.2)
    p1 = events(1, list(range(0, 26, 2)))                      # [0, 25] s: on time
    p2 = events(2, list(range(70, 96, 3)))                     # merges with p1 sessions (gap 45 s < 60 s)
    p3_late = events(3, [10, 12, 14, 50, 55], late=True)       # behind the watermark (>= base+65 s)
    p3 = events(4, [100, 104, 108, 110]) + [p1[0]]             # on time, plus a duplicate of p1's first
    try:
        for phase in (p1, p2, p3_late + p3):
            produce(settings, name, [{k: v for k, v in e.items() if k != "_late"} for e in phase])
            query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None

    on_time = {e["txn_id"]: e for e in p1 + p2 + p3}.values()  # the duplicate counts once
    want_rows, want_late = expected(list(on_time), p3_late)
    got_rows = {(r["kind"], r["key"], r["window_start"], r["window_end"]): (r["processed"], r["fraud"])
                for r in store["windows"].rows}
    got_late = {(r["kind"], r["window_start"]): r["count"] for r in store["late_events"].rows}
    assert got_rows == want_rows
    assert got_late == want_late and sum(v for (k, _), v in got_late.items() if k == "tumbling") == 5
    sessions = [k for k in got_rows if k[0] == "session"]
    assert any(end - start > 60 * S + 45 * S for _, _, start, end in sessions)  # merged across batches
    # the ledger: each batch applied once, under one checkpoint, their ranges tiling the topic
    batches = ledger.batches(store, windows.QUERY)
    applied = [b for b in batches if b["outcome"] == ledger.APPLIED]
    assert applied == batches and len({b["checkpoint_id"] for b in applied}) == 1
    assert [b["batch_id"] for b in applied] == list(range(len(applied)))
    ends = kafka_client.end_offsets(name, settings)
    covered = {p: 0 for p in ends}
    for b in applied:
        start, end = json.loads(b["start_offsets"])[name], json.loads(b["end_offsets"])[name]
        for p in ends:
            assert start.get(str(p), 0) == covered[p]  # each batch starts where the one before ended
            covered[p] = end[str(p)]
    assert covered == ends
    assert sum(b["processed"] for b in applied) == len(on_time)
