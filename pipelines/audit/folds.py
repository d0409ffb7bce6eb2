"""The audit's cuts, folded: what lies below a query's committed offsets is counted once, kept as
numbers, and forgotten; only the records beyond, and a horizon of recent ones, stay in memory.

A cut folds at its query's committed offsets because nothing below them can change any more:
Spark never replays a committed batch, a usage sink's ledger row for every batch up to the
commit is written before the commit, and the fraud job writes a batch's decisions (store and
topic) before it commits the batch. So lost, replayed and upstream are as exact as an audit over
everything ever read, in memory that does not grow with the run. One limit, stated: a txn_id
repeated in the input further apart than the horizon (`AUDIT_HORIZON_MINUTES`, 10 by default, as
long as the exactly-once dedupe remembers) counts as two transactions of the truth.

Each cut is persisted (`audit_cuts`) after every audit, so a restarted auditor resumes from its
folds and reads the topics from the horizon, not from offset 0; and truth stays counted when
Kafka's retention deletes the records it was counted from.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np

from controlplane import ledger
from pipelines.audit.cut import Application, Partition, Records, Tally, count, lag, records, sums
from pipelines.audit.topics import code

Offsets = dict[int, int]


def _ranges(offsets_json: str | None, topic: str) -> Offsets:
    try:
        doc = json.loads(offsets_json or "{}")
    except ValueError:
        return {}
    return {int(p): int(o) for p, o in (doc.get(topic) or {}).items()}


def application(row: dict, topic: str) -> Application:
    start, end = _ranges(row["start_offsets"], topic), _ranges(row["end_offsets"], topic)
    return Application((row["checkpoint_id"], row["batch_id"]), row["processed"] or 0, row["fraud"] or 0,
                       {p: (start.get(p, 0), e) for p, e in end.items()}, row.get("id") or 0, row.get("ts") or 0)


def in_cut(row: dict, checkpoint_id: str | None, committed: int | None) -> bool:
    """Whether a ledger row is an application inside the cut: every applied batch of older
    checkpoints, and those of the current checkpoint up to its committed batch."""
    if row["outcome"] != ledger.APPLIED:
        return False
    return not (row["checkpoint_id"] == checkpoint_id and (committed is None or row["batch_id"] > committed))


def first_time(parts: dict[int, Partition], at: Offsets) -> int | None:
    """The earliest append time of the records at or beyond `at` (None: none held)."""
    times = [int(part.times[part.between(at.get(p, 0), None)].min()) for p, part in parts.items()
             if part.between(at.get(p, 0), None).stop > part.between(at.get(p, 0), None).start]
    return min(times) if times else None


def _target(fold: Offsets, committed: Offsets, read_to: Offsets) -> Offsets:
    """Where a cut folds to: its query's committed offsets, never back, never past what was read."""
    return {p: max(fold.get(p, 0), min(o, read_to.get(p, 0))) for p, o in committed.items()}


def _ints(d: dict) -> Offsets:
    return {int(p): int(o) for p, o in (d or {}).items()}


@dataclass
class UsageCut:
    """One usage query: `folded` counts the input records in [start, fold) and the ledger rows
    folded (every row up to `ledger_pos`, and `folded_ids` beyond it)."""
    guarantee: str
    signature: str | None = None      # what the query started from (usage_starts, else its checkpoint):
                                      # another one means the sink was reset, and the cut starts over
    start: Offsets = field(default_factory=dict)
    fold: Offsets = field(default_factory=dict)
    folded: Tally = field(default_factory=Tally)
    ledger_pos: int = 0
    folded_ids: list[int] = field(default_factory=list)
    recent: list[Application] = field(default_factory=list)   # folded, within the horizon (not persisted)

    def to_json(self) -> str:
        d = asdict(self)
        d.pop("recent")
        return json.dumps(d)

    @staticmethod
    def from_json(text: str) -> "UsageCut":
        d = json.loads(text)
        return UsageCut(d["guarantee"], d.get("signature"), _ints(d.get("start")), _ints(d.get("fold")),
                        Tally(**d.get("folded") or {}), int(d.get("ledger_pos") or 0),
                        list(d.get("folded_ids") or []))

    def update(self, parts: dict[int, Partition], read_to: Offsets, topic: str, rows: list[dict],
               checkpoint_id: str | None, committed_batch: int | None, committed: Offsets, now: int) -> dict:
        """Fold what the query has committed, then count the rest afresh: the figures of
        `pipelines.audit.cut` over [start, committed end). `rows`: the ledger's rows after
        `ledger_pos`; `read_to`: how far the topic has been read."""
        done = set(self.folded_ids)
        inside = [application(r, topic) for r in rows if r["id"] not in done
                  and in_cut(r, checkpoint_id, committed_batch)]
        target = _target(self.fold or self.start, committed, read_to)
        foldable, live = self._split(inside, target)
        seen = {a.key for a in self.recent}
        region = records(parts, self.fold or self.start, target, foldable)
        history = records(parts, self.start, self.fold or self.start, self.recent)
        self.folded = self.folded + count(region, history) + sums(sorted(foldable, key=lambda a: a.id), seen)
        self.fold = {**self.fold, **target}
        self.recent += foldable
        self._advance(rows, {a.id for a in foldable} | done, {a.id for a in live} | {
            r["id"] for r in rows if r["outcome"] == ledger.APPLIED and not in_cut(r, checkpoint_id, committed_batch)})

        end = dict(self.fold)
        for a in live:
            for p, (_, b) in a.ranges.items():
                end[p] = max(end.get(p, 0), b)
        for p, o in committed.items():
            end[p] = max(end.get(p, 0), o)
        history = records(parts, self.start, self.fold, self.recent)
        total = self.folded + count(records(parts, self.fold, end, live), history) + sums(live, seen)
        out = total.compare()
        out.update(lag(parts, end, now), committed_offsets={str(p): o for p, o in sorted(end.items())})
        return out

    def _split(self, inside: list[Application], target: Offsets) -> tuple[list, list]:
        """Applications wholly below `target` fold; the others lower `target` to where they start,
        so no application straddles the fold line."""
        while True:
            foldable = [a for a in inside if all(b <= target.get(p, self.fold.get(p, 0))
                                                  for p, (_, b) in a.ranges.items())]
            live = [a for a in inside if a not in foldable]
            lowered = False
            for a in live:
                for p, (lo, _) in a.ranges.items():
                    floor = self.fold.get(p, self.start.get(p, 0))
                    if lo < target.get(p, floor) and max(lo, floor) < target.get(p, floor):
                        target[p] = max(lo, floor)
                        lowered = True
            if not lowered:
                return foldable, live

    def _advance(self, rows: list[dict], folded: set, pending: set) -> None:
        for r in sorted(rows, key=lambda r: r["id"]):
            if r["id"] in pending:
                break
            self.ledger_pos = r["id"]
        self.folded_ids = sorted(i for i in folded if i > self.ledger_pos)

    def forget(self, before_ms: int) -> None:
        self.recent = [a for a in self.recent if a.ts >= before_ms]


@dataclass
class FraudCut:
    """The fraud job's decisions: the valid transactions in [start, fold) counted once, with how
    many the store and the decisions topic hold and the labels' confusion counts."""
    checkpoint_id: str | None = None
    start: Offsets = field(default_factory=dict)
    fold: Offsets = field(default_factory=dict)
    truth: int = 0
    observed: int = 0
    topic: int = 0
    tp: int = 0
    fp: int = 0
    fn: int = 0
    since_ms: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> "FraudCut":
        d = json.loads(text)
        d["start"], d["fold"] = _ints(d.get("start")), _ints(d.get("fold"))
        return FraudCut(**d)

    def update(self, parts: dict[int, Partition], read_to: Offsets, committed: Offsets, valid, take_ids,
               decided, in_topic, label) -> None:
        """Fold the transactions up to the job's committed offsets.

        valid(part, slice) -> mask: part of the truth (not a dead letter); take_ids({p: end}): the
        (offset, txn_id) of each partition from the last take up to end; decided(txn_ids) -> {txn_id: is_fraud}
        from the store; in_topic(codes) -> mask: in the decisions topic; label(codes) -> (known,
        is_fraud) masks."""
        target = _target(self.fold or self.start, committed, read_to)
        region = records(parts, self.fold or self.start, target, [], keep=valid)
        history = records(parts, self.start, self.fold or self.start, [], keep=valid)
        new = np.unique(region.codes)
        if history.codes.size and new.size:
            new = new[~np.isin(new, history.codes)]
        ids = {code(txn_id): txn_id for _, txn_id in take_ids(target)}
        wanted = [ids[c] for c in new.tolist() if c in ids]
        got = decided(wanted)
        is_decided = np.asarray([ids.get(c) in got for c in new.tolist()], dtype=bool)
        flagged = np.asarray([bool(got.get(ids.get(c))) for c in new.tolist()], dtype=bool)
        known, fraud = label(new)
        self.truth += int(new.size)
        self.observed += int(is_decided.sum())
        self.topic += int(in_topic(new).sum())
        self.tp += int((is_decided & flagged & known & fraud).sum())
        self.fp += int((is_decided & flagged & known & ~fraud).sum())
        self.fn += int((is_decided & ~flagged & known & fraud).sum())
        self.fold = {**self.fold, **target}
        self.since_ms = first_time(parts, self.fold)


@dataclass
class Duplicates:
    """Records of a topic beyond one per txn_id, counted as they are read, against the records
    held (the horizon) and each other."""
    counted_to: Offsets = field(default_factory=dict)
    duplicated: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> "Duplicates":
        d = json.loads(text)
        return Duplicates(_ints(d.get("counted_to")), int(d.get("duplicated") or 0))

    def update(self, parts: dict[int, Partition]) -> None:
        old, new = [], []
        for p, part in parts.items():
            i = int(np.searchsorted(part.offsets, self.counted_to.get(p, 0), "left"))
            old.append(part.codes[:i])
            new.append(part.codes[i:])
            if len(part.offsets):
                self.counted_to[p] = max(self.counted_to.get(p, 0), int(part.offsets[-1]) + 1)
        old_c = np.concatenate(old) if old else np.zeros(0, np.int64)
        new_c = np.concatenate(new) if new else np.zeros(0, np.int64)
        if not new_c.size:
            return
        again = np.isin(new_c, old_c) if old_c.size else np.zeros(new_c.size, bool)
        rest = new_c[~again]
        self.duplicated += int(again.sum()) + int(rest.size - np.unique(rest).size)


def ledger_rows(db, sink: str, after: int) -> list[dict]:
    """The sink ledger's rows after id `after` (the ones a cut has not folded)."""
    return [dict(r) for r in db.query("SELECT * FROM sink_batches WHERE sink = ? AND id > ? ORDER BY id", [sink, after])]


def applications(rows: list[dict], topic: str, checkpoint_id: str | None, committed: int | None) -> list[Application]:
    """The ledger's applied batches inside the cut: every batch of older checkpoints, and those of
    the current checkpoint up to its committed batch (later ones are ahead of the cut)."""
    return [application(r, topic) for r in rows if in_cut(r, checkpoint_id, committed)]


__all__ = ["UsageCut", "FraudCut", "Duplicates", "Records", "application", "applications", "in_cut",
           "ledger_rows"]
