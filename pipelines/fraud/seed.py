"""The real-time path's seed: the stateful path's card profiles, the Kafka offsets they cover,
and where the real-time query starts reading.

The live profiles (pipelines/fraud/jvm, `LiveProfiles.java`) fold every transaction from the seed's
offsets on, so a profile misses nothing the stateful path had not folded either. The offsets are
the profiles' own cut (`card_profile_cuts`, written in the same fenced transaction as the profiles
and the ledger row, which the fraud job does in real-time mode only): after a micro-batch run the
cut is older than the newest applied batch, and the real-time path folds again from the cut. The
seed holds the analyzers' profiles written within the state's TTL (the cards the stateful path
still holds) and each card's event-time history (its last 60 days of payments, kept for the
history's longer TTL), so the model's card windows are whole from the first payment after a start
(`history_from`); it is read in one store transaction, and written whole or not at all.

`plan` is pure: where each partition starts reading, from where it folds, and which partitions
have a hole (transactions the profiles will never see: replaying back to the cut would be longer
than `max_replay` records, or the topic no longer holds them). Without a cut, but with history
the stateful path applied (a micro-batch run before the first real-time start), the profiles fold
from the topic's start as if `earliest`, so that history is folded or its hole is said.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from infra.partitioner import partitions_for
from pipelines.fraud.analyzers import Limits, limits_text

PROFILE_COLUMNS = ("card_id", "count", "mean", "lat", "lon", "place_time", "times", "history")


@dataclass(frozen=True)
class Snapshot:
    """The stateful path's profiles and what they cover (the newest batch that wrote them)."""
    as_of: int | None = None                      # when that batch was applied (None: no cut)
    ends: dict = field(default_factory=dict)      # {partition: end offset, exclusive}
    profiles: list = field(default_factory=list)  # PROFILE_COLUMNS tuples
    history: bool = False                         # the stateful path applied batches (profiles or not)


@dataclass(frozen=True)
class Plan:
    starts: dict   # {partition: the offset the real-time query starts reading at}
    folds: dict    # {partition: the first offset the live profiles fold}
    holes: dict    # {partition: ms}: the profiles miss what came between the snapshot and the fold
    missed: dict = field(default_factory=dict)  # {partition: the first offset a hole misses}


def read_snapshot(db, sink: str, topic: str, now: int, ttl_ms: int, history_ttl_ms: int = 0) -> Snapshot:
    """The profiles' cut on `topic` and the profiles written within `ttl_ms` of `now`, in one read;
    and the cards written within `history_ttl_ms` (the event-time history's TTL, longer) with their
    history only: the stateful path has dropped their analyzers' profile but keeps their windows."""
    conn = db.conn
    conn.execute("BEGIN")
    try:
        cut = conn.execute("SELECT end_offsets, ts FROM card_profile_cuts WHERE sink = ?", [sink]).fetchone()
        history = conn.execute("SELECT 1 FROM sink_batches WHERE sink = ? AND outcome = 'applied' LIMIT 1",
                               [sink]).fetchone() is not None
        rows = [] if cut is None else conn.execute(
            f"SELECT {', '.join(PROFILE_COLUMNS)}, updated_at FROM card_profiles WHERE updated_at >= ?",
            [now - max(ttl_ms, history_ttl_ms)]).fetchall()
    finally:
        conn.execute("COMMIT")
    if cut is None:
        return Snapshot(history=history)
    profiles = [tuple(r[:-1]) if r[-1] >= now - ttl_ms else (r[0], None, None, None, None, None, "", r[-2])
                for r in rows if r[-1] >= now - ttl_ms or r[-2]]
    ends = (json.loads(cut[0] or "{}") or {}).get(topic) or {}
    return Snapshot(int(cut[1]), {int(p): int(o) for p, o in ends.items()}, profiles, history)


def plan(snapshot: Snapshot, earliest: dict, latest: dict, policy: str, resume: dict | None,
         max_replay: int, now: int) -> Plan:
    """Where the real-time query reads from, per partition of the topic (`latest` names them).

    Folding starts where the snapshot ends (without one: where the stateful path starts, `policy`
    earliest or latest, so both paths know the same stream; earliest whenever the stateful path
    has applied history the profiles lack). Reading starts there too, or earlier at the real-time
    path's own last committed offsets (`resume`, at-least-once: nothing it had not committed is
    skipped). No partition reads back more than `max_replay` records, and none can read what the
    topic no longer holds: a fold cut short leaves a hole, dated at the snapshot (or now: the
    caller dates it by the first missed record, `missed`), and the decisions say so.
    """
    starts, folds, holes, missed = {}, {}, {}, {}
    for p, end in latest.items():
        first = earliest.get(p, 0)
        whole = policy == "earliest" or snapshot.history
        fold = min(snapshot.ends.get(p, first if whole else end), end)
        start = min(max(fold, first), (resume or {}).get(p, fold))
        floor = max(first, end - max_replay)
        if fold < floor:
            holes[p] = snapshot.as_of if snapshot.as_of is not None else now
            missed[p] = max(fold, first)
            fold = floor
        starts[p], folds[p] = max(start, floor), fold
    return Plan(starts, folds, holes, missed)


def partition_of(card_ids: list[str], partitions: int) -> list[int]:
    """The Kafka partition each card's transactions go to (the simulator keys them by card id)."""
    if not card_ids:
        return []
    return [int(p) for p in partitions_for([c.encode() for c in card_ids], partitions)]


def history_from(snapshot: Snapshot, complete_from: int | None) -> int | None:
    """Since when (event time) the seeded card histories hold every payment of their cards: the
    stateful path's, `complete_from` (since when it has decided every payment: its terminal
    table's, realtime.TerminalTable), when every seeded card carries its history; else None (the
    live windows are whole only from their first fold on)."""
    if snapshot.as_of is None or complete_from is None:
        return None
    if any(len(r) < 8 or r[7] is None for r in snapshot.profiles):
        return None  # a profile written before the history was: its card's windows are not known
    return int(complete_from)


def seed_lines(scope: str, snapshot: Snapshot, p: Plan, limits: Limits, ttl_ms: int, partitions: int,
               now: int | None = None, history_from: int | None = None, history_ttl_ms: int | None = None):
    """The seed file's lines (LiveProfiles.read): tab-separated, `end-of-seed` last. `cut`: when
    the seeded profiles were whole (the snapshot's time, else the start, `now`): a card folds
    nothing newer until its next transaction; `partitions`: the topic's, to tell a transaction
    on another partition than its card's key would give (a producer not keying by card);
    `history_from`: since when the cards' histories are whole (the function above), so the model's
    card windows are served from the first payment after the start; `history_ttl_ms`: how long a
    quiet card keeps its history (its analyzers' profile goes after `ttl_ms`)."""
    yield f"scope\t{scope}"
    yield f"limits\t{limits_text(limits)}\tttl_ms={int(ttl_ms)}"
    cut = snapshot.as_of if snapshot.as_of is not None else now
    if cut is not None:
        yield f"cut\t{int(cut)}"
    yield f"partitions\t{int(partitions)}"
    if history_from is not None:
        yield f"history_from\t{int(history_from)}"
    if history_ttl_ms is not None:
        yield f"history_ttl\t{int(history_ttl_ms)}"
    for part, offset in sorted(p.folds.items()):
        yield f"end\t{part}\t{offset}"
    for part, ms in sorted(p.holes.items()):
        yield f"hole\t{part}\t{ms}"
    cards = [r for r in snapshot.profiles if isinstance(r[0], str) and not any(c in r[0] for c in "\t\n\r")]
    for part, row in zip(partition_of([r[0] for r in cards], partitions), cards):
        card_id, count, mean, lat, lon, place_time, times = row[:7]
        history = row[7] if len(row) > 7 else None
        yield "\t".join(["card", str(part), card_id, _text(count), _text(mean), _text(lat), _text(lon),
                         _text(place_time), times or "", history or ""])
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
