"""The folded cuts (pipelines.audit.folds): an audit that forgets what its queries committed gives
the same figures, at every step, as the cut's arithmetic over everything ever read, and holds
only the unfolded records and the horizon."""
from __future__ import annotations

import json

import numpy as np
import pytest

from infra.config import load
from pipelines.audit import applications
from pipelines.audit.cut import Partition, figures
from pipelines.audit.folds import Duplicates, FraudCut, UsageCut, application
from pipelines.audit.topics import Lookup, TopicIndex, code
from pipelines.engine.checkpoints import merge_max

TOPIC = "decisions"
HORIZON = 40          # steps of time the folded audit keeps behind its folds


class World:
    """A decisions topic of two partitions and one query's ledger, step by step."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.parts = {p: Partition(*(np.zeros(0, t) for t in (np.int64, np.int64, bool, np.int64))) for p in (0, 1)}
        self.next_code, self.rows, self.now = 0, [], 0
        self.checkpoint, self.batch, self.committed_batch = "cp-1", 0, None
        self.committed = {0: 0, 1: 0}
        self.pending = None   # a batch applied, not committed (crashed after the sink)

    def produce(self) -> None:
        self.now += 1
        for p, part in self.parts.items():
            n = int(self.rng.integers(0, 6))
            codes = []
            for _ in range(n):
                if self.next_code > 10 and self.rng.random() < 0.08:   # one txn_id again, upstream
                    codes.append(int(self.rng.integers(max(0, self.next_code - 30), self.next_code)))
                else:
                    codes.append(self.next_code)
                    self.next_code += 1
            start = int(part.offsets[-1]) + 2 if len(part.offsets) else 0    # +2: transaction markers
            offsets = np.arange(start, start + 2 * n, 2, dtype=np.int64)
            fraud = np.asarray([c % 7 == 0 for c in codes], bool)
            self.parts[p] = part.append(Partition(offsets, np.asarray(codes, np.int64), fraud,
                                                  np.full(n, self.now, np.int64)))

    def end(self) -> dict:
        return {p: (int(part.offsets[-1]) + 2 if len(part.offsets) else 0) for p, part in self.parts.items()}

    def _row(self, start: dict, end: dict, batch: int, checkpoint: str) -> dict:
        n = f = 0
        for p, part in self.parts.items():
            cut = part.between(start[p], end[p])
            n += cut.stop - cut.start
            f += int(part.fraud[cut].sum())
        row = {"id": len(self.rows) + 1, "sink": "q", "checkpoint_id": checkpoint, "batch_id": batch,
               "outcome": "applied", "processed": n, "fraud": f, "ts": self.now,
               "start_offsets": json.dumps({TOPIC: {str(p): o for p, o in start.items()}}),
               "end_offsets": json.dumps({TOPIC: {str(p): o for p, o in end.items()}})}
        self.rows.append(row)
        return row

    def run_batch(self, guarantee: str) -> None:
        """One trigger: a batch over everything new; sometimes a crash after the sink."""
        r = self.rng.random()
        if self.pending is not None:          # the restart after a crash
            start, end, batch = self.pending
            self.pending = None
            if guarantee == "at-least-once":  # the same batch again: a replay
                self._row(start, end, batch, self.checkpoint)
                self.committed, self.committed_batch, self.batch = end, batch, batch + 1
            else:                             # at-most-once: a new checkpoint from the latest offsets
                self.checkpoint, self.batch, self.committed_batch = f"cp-{self.now}", 0, None
                self.committed = self.end()
            return
        end = self.end()
        if end == self.committed:
            return
        if r < 0.05:                          # a dropped batch: at-most-once's failed write, no row
            self.committed, self.committed_batch, self.batch = end, self.batch, self.batch + 1
            return
        self._row(self.committed, end, self.batch, self.checkpoint)
        if r < 0.15:
            self.pending = (dict(self.committed), end, self.batch)
            return
        self.committed, self.committed_batch, self.batch = end, self.batch, self.batch + 1

    def truth(self, start: dict) -> dict:
        """The cut's arithmetic over every record and ledger row (what the unbounded audit did)."""
        apps = applications(self.rows, TOPIC, self.checkpoint, self.committed_batch)
        end = merge_max({TOPIC: self.committed}, *({TOPIC: {p: b for p, (_, b) in a.ranges.items()}} for a in apps))[TOPIC]
        return figures(self.parts, start, end, apps, self.now)


def held(parts: dict, fold: dict, now: int) -> dict:
    """What the folded audit keeps: the unfolded records and the horizon."""
    out = {}
    for p, part in parts.items():
        cut = min(part.first_at(now - HORIZON), int(np.searchsorted(part.offsets, fold.get(p, 0), "left")))
        out[p] = part.tail(cut)
    return out


@pytest.mark.unit
@pytest.mark.parametrize("guarantee,seed", [("at-least-once", 1), ("at-least-once", 2), ("at-most-once", 3),
                                            ("at-most-once", 4)])
def test_folded_figures_equal_the_whole_cut_at_every_step(guarantee, seed):
    w = World(seed)
    cut = UsageCut(guarantee, "sig", {0: 0, 1: 0}, {0: 0, 1: 0})
    keys = ("truth", "observed", "lost", "duplicated", "replayed", "upstream", "fraud_truth", "fraud_lost",
            "fraud_duplicated", "lag_records")
    most_held = 0
    for _ in range(300):
        w.produce()
        w.run_batch(guarantee)
        parts = held(w.parts, cut.fold, w.now)
        rows = [r for r in w.rows if r["id"] > cut.ledger_pos]
        got = cut.update(parts, w.end(), TOPIC, rows, w.checkpoint, w.committed_batch, w.committed, w.now)
        cut.forget(w.now - HORIZON)
        want = w.truth({0: 0, 1: 0})
        assert {k: got[k] for k in keys} == {k: want[k] for k in keys}
        most_held = max(most_held, sum(len(p.offsets) for p in held(w.parts, cut.fold, w.now).values()))
    total = sum(len(p.offsets) for p in w.parts.values())
    assert want["upstream"] > 0 and want["lost" if guarantee == "at-most-once" else "replayed"] > 0
    assert most_held < total / 4, (most_held, total)   # the folded audit forgets what it counted
    assert len(cut.recent) < len(w.rows) / 4


@pytest.mark.unit
def test_a_cut_survives_a_restart_from_its_saved_state():
    w = World(5)
    cut = UsageCut("at-least-once", "sig", {0: 0, 1: 0}, {0: 0, 1: 0})
    for step in range(300):
        w.produce()
        w.run_batch("at-least-once")
        if step == 150:  # the auditor restarts: its numbers from the store, recent applications from the ledger
            saved = UsageCut.from_json(cut.to_json())
            done = set(saved.folded_ids)
            saved.recent = [a for a in _apps(w.rows) if a.ts >= w.now - HORIZON and (a.id <= saved.ledger_pos or a.id in done)]
            cut = saved
        rows = [r for r in w.rows if r["id"] > cut.ledger_pos]
        got = cut.update(held(w.parts, cut.fold, w.now), w.end(), TOPIC, rows, w.checkpoint, w.committed_batch,
                         w.committed, w.now)
        cut.forget(w.now - HORIZON)
    want = w.truth({0: 0, 1: 0})
    assert (got["truth"], got["lost"], got["duplicated"], got["replayed"]) == \
        (want["truth"], want["lost"], want["duplicated"], want["replayed"])


def _apps(rows):
    return [application(r, TOPIC) for r in rows]


def _part(codes, offsets=None, times=None):
    n = len(codes)
    return Partition(np.asarray(offsets if offsets is not None else range(n), np.int64), np.asarray(codes, np.int64),
                     np.zeros(n, bool), np.asarray(times if times is not None else [0] * n, np.int64))


@pytest.mark.unit
def test_the_fraud_cut_counts_each_valid_transaction_once_as_it_folds():
    ids = {c: f"t{c}" for c in range(10)}
    codes = [code(ids[c]) for c in (0, 1, 2, 3, 1, 4, 5, 6, 7, 8)]   # t1 twice (upstream), offset 4
    part = _part(codes)
    queue = [(o, f"t{c}") for o, c in enumerate((0, 1, 2, 3, 1, 4, 5, 6, 7, 8))]
    invalid = {code("t3")}                                          # a dead letter

    def take(ends):
        out = [q for q in queue if q[0] < ends[0]]
        del queue[:len(out)]
        return out

    store = {"t0": True, "t1": False, "t2": False, "t4": False, "t5": False, "t6": True}   # t7: lost
    topic = np.asarray([code(t) for t in ("t0", "t1", "t2", "t4", "t5")], np.int64)       # t6 not in the topic
    labels = {code("t0"): True, code("t6"): False, code("t7"): True}
    cut = FraudCut("cp", {0: 0}, {0: 0})
    args = dict(valid=lambda prt, s: ~np.isin(prt.codes[s], list(invalid)), take_ids=take,
                decided=lambda txns: {t: store[t] for t in txns if t in store},
                in_topic=lambda c: np.isin(c, topic),
                label=lambda c: (np.isin(c, list(labels)), np.asarray([labels.get(int(x), False) for x in c], bool)))
    cut.update({0: part}, {0: 10}, {0: 5}, **args)
    assert (cut.truth, cut.observed, cut.topic) == (3, 3, 3)     # t0 t1 t2; t3 is a dead letter; t1 again
    cut.update({0: part.tail(3)}, {0: 10}, {0: 9}, **args)         # the head forgotten, the duplicate held
    assert (cut.truth, cut.observed, cut.topic) == (7, 6, 5)     # + t4 t5 t6 t7; t7 undecided; t6 not in topic
    assert (cut.tp, cut.fp, cut.fn) == (1, 1, 0)                 # t0 right; t6 flagged, labelled genuine
    assert cut.fold == {0: 9}
    again = FraudCut.from_json(cut.to_json())
    assert (again.truth, again.observed, again.fold) == (7, 6, {0: 9})


@pytest.mark.unit
def test_duplicates_are_counted_once_as_they_are_read():
    d = Duplicates()
    d.update({0: _part([1, 2, 3, 2])})
    assert d.duplicated == 1
    d.update({0: _part([1, 2, 3, 2, 3, 4, 4], offsets=range(7))})   # only offsets 4.. are new
    assert d.duplicated == 3
    d.update({0: _part([3, 2, 4, 4, 5], offsets=range(2, 7))})       # the head forgotten: nothing new
    assert (d.duplicated, d.counted_to) == (3, {0: 7})


@pytest.mark.unit
def test_label_lookup_with_labels_and_with_none():
    index = TopicIndex(load(), "labels")
    codes = np.asarray([5, 7, 9], np.int64)
    assert [m.tolist() for m in Lookup(index).find(codes)] == [[False] * 3] * 3   # none read yet
    index._parts[0] = Partition(np.arange(3, dtype=np.int64), np.asarray([9, 5, 11], np.int64),
                                np.asarray([True, False, True]), np.zeros(3, np.int64), np.asarray([False, True, False]))
    found, fraud, bad = Lookup(index).find(codes)
    assert (found.tolist(), fraud.tolist(), bad.tolist()) == ([True, False, True], [False, False, True],
                                                              [True, False, False])
