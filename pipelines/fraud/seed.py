"""The real-time path's seed: the stateful path's card profiles, the Kafka offsets they cover,
and where the real-time query starts reading.

The live profiles (pipelines/fraud/jvm, `LiveProfiles.java`) fold every transaction from the seed's
offsets on, so a profile misses nothing the stateful path had not folded either. The seed is read
in one store transaction (the fraud sink writes a batch's profiles and its ledger row in one), so
the profiles and the offsets agree, and written whole or not at all.

`plan` is pure: where each partition starts reading, from where it folds, and which partitions
have a hole (transactions the profiles will never see, because replaying back to the snapshot
would be longer than `max_replay` records).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from infra.partitioner import partitions_for
from pipelines.fraud.analyzers import Limits, limits_text

PROFILE_COLUMNS = ("card_id", "count", "mean", "lat", "lon", "place_time", "times")


@dataclass(frozen=True)
class Snapshot:
    """The stateful path's profiles and what they cover (its newest applied batch)."""
    as_of: int | None = None                      # when that batch was applied (None: none yet)
    ends: dict = field(default_factory=dict)      # {partition: end offset, exclusive}
    profiles: list = field(default_factory=list)  # PROFILE_COLUMNS tuples


@dataclass(frozen=True)
class Plan:
    starts: dict   # {partition: the offset the real-time query starts reading at}
    folds: dict    # {partition: the first offset the live profiles fold}
    holes: dict    # {partition: ms}: the profiles miss what came between the snapshot and the fold


def read_snapshot(db, sink: str, topic: str) -> Snapshot:
    """The newest applied batch's end offsets on `topic` and every card profile, in one read."""
    conn = db.conn
    conn.execute("BEGIN")
    try:
        row = conn.execute("SELECT end_offsets, ts FROM sink_batches WHERE sink = ? AND outcome = 'applied' "
                           "ORDER BY id DESC LIMIT 1", [sink]).fetchone()
        profiles = conn.execute(f"SELECT {', '.join(PROFILE_COLUMNS)} FROM card_profiles").fetchall()
    finally:
        conn.execute("COMMIT")
    if row is None:
        return Snapshot(profiles=[tuple(p) for p in profiles])
    ends = (json.loads(row[0] or "{}") or {}).get(topic) or {}
    return Snapshot(int(row[1]), {int(p): int(o) for p, o in ends.items()}, [tuple(p) for p in profiles])


def plan(snapshot: Snapshot, earliest: dict, latest: dict, policy: str, resume: dict | None,
         max_replay: int, now: int) -> Plan:
    """Where the real-time query reads from, per partition of the topic (`latest` names them).

    Folding starts where the snapshot ends (without a snapshot: where the stateful path starts,
    `policy` earliest or latest, so both paths know the same stream). Reading starts there too, or
    earlier at the real-time path's own last committed offsets (`resume`, at-least-once: nothing
    it had not committed is skipped). No partition reads back more than `max_replay` records: a
    fold cut short leaves a hole, dated at the snapshot (or now), and the decisions say so.
    """
    starts, folds, holes = {}, {}, {}
    for p, end in latest.items():
        first = earliest.get(p, 0)
        fold = snapshot.ends.get(p, first if policy == "earliest" else end)
        fold = min(max(fold, first), end)
        start = min(fold, (resume or {}).get(p, fold))
        floor = max(first, end - max_replay)
        if fold < floor:
            holes[p] = snapshot.as_of if snapshot.as_of is not None else now
            fold = floor
        starts[p], folds[p] = max(start, floor), fold
    return Plan(starts, folds, holes)


def partition_of(card_ids: list[str], partitions: int) -> list[int]:
    """The Kafka partition each card's transactions go to (the simulator keys them by card id)."""
    if not card_ids:
        return []
    return [int(p) for p in partitions_for([c.encode() for c in card_ids], partitions)]


def seed_lines(scope: str, snapshot: Snapshot, p: Plan, limits: Limits, ttl_ms: int, partitions: int):
    """The seed file's lines (LiveProfiles.read): tab-separated, `end-of-seed` last."""
    yield f"scope\t{scope}"
    yield f"limits\t{limits_text(limits)}\tttl_ms={int(ttl_ms)}"
    for part, offset in sorted(p.folds.items()):
        yield f"end\t{part}\t{offset}"
    for part, ms in sorted(p.holes.items()):
        yield f"hole\t{part}\t{ms}"
    cards = [r for r in snapshot.profiles if isinstance(r[0], str) and not any(c in r[0] for c in "\t\n\r")]
    for part, row in zip(partition_of([r[0] for r in cards], partitions), cards):
        card_id, count, mean, lat, lon, place_time, times = row
        yield "\t".join(["card", str(part), card_id, _text(count), _text(mean), _text(lat), _text(lon),
                         _text(place_time), times or ""])
    yield "end-of-seed"


def _text(value) -> str:
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)


def write(path: Path, lines) -> Path:
    """Write the seed whole (a temporary file renamed), so the JVM never reads half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
    os.replace(tmp, path)
    return path
