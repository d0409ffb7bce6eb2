"""The consistent cut, as plain arithmetic over a topic's records and a sink's ledger (pure).

For one query at one instant: the input records in [start, end) — start where the query first
began reading, end the offsets it has committed — against the ledger's applications of batches
up to its committed batch. Every figure is exact at that cut and none includes lag:

- truth: distinct txn_ids in the range;
- observed: what the included applications added (`processed`);
- lost: ids no application covered (read past while down, or in a dropped batch), plus ids
  covered but not counted;
- replayed: what applications of a batch already applied (same checkpoint, same batch id) added
  again — the query's own replays;
- upstream: what was counted more than once because one txn_id came twice in the input;
- duplicated = replayed + upstream.
"""
from __future__ import annotations

from dataclasses import astuple, dataclass

import numpy as np


@dataclass
class Partition:
    """One partition's records, sorted by offset: offsets, txn_id codes, fraud flags, append
    times, and `bad` (a label marking a malformed input; None: no such flags)."""
    offsets: np.ndarray
    codes: np.ndarray
    fraud: np.ndarray
    times: np.ndarray
    bad: np.ndarray | None = None

    def between(self, start: int, end: int | None) -> slice:
        lo = int(np.searchsorted(self.offsets, start, "left"))
        hi = len(self.offsets) if end is None else int(np.searchsorted(self.offsets, end, "left"))
        return slice(lo, max(lo, hi))

    def first_at(self, ms: int) -> int:
        """Index of the first record appended at or after `ms` (len: none)."""
        later = self.times >= ms
        return int(np.argmax(later)) if later.any() else len(self.times)

    def _cols(self):
        return self.offsets, self.codes, self.fraud, self.times, self.bad

    def append(self, other: "Partition") -> "Partition":
        bad = None if self.bad is None or other.bad is None else np.concatenate([self.bad, other.bad])
        return Partition(*(np.concatenate([a, b]) for a, b in zip(self._cols()[:4], other._cols()[:4])), bad)

    def tail(self, i: int) -> "Partition":
        """The records from index `i` on (copies, so the dropped head is freed)."""
        return Partition(*(None if a is None else a[i:].copy() for a in self._cols()))


@dataclass(frozen=True)
class Application:
    """One ledger record of a batch the sink applied."""
    key: tuple                        # (checkpoint id, batch id): a replay repeats it
    processed: int
    fraud: int
    ranges: dict                      # {partition: (start, end)} of the input topic
    id: int = 0                       # the ledger row's id
    ts: int = 0                       # when the sink applied it


@dataclass
class Tally:
    """What a cut counts, additive over disjoint offset ranges: distinct txn_ids in the input
    (truth) and among the records some application covered, with the ledger's sums."""
    truth: int = 0
    covered: int = 0
    fraud_truth: int = 0
    fraud_covered: int = 0
    observed: int = 0
    fraud_observed: int = 0
    replayed: int = 0
    fraud_replayed: int = 0

    def __add__(self, other: "Tally") -> "Tally":
        return Tally(*(a + b for a, b in zip(astuple(self), astuple(other))))

    def compare(self) -> dict:
        out = _compare(self.truth, self.covered, self.observed, self.replayed)
        fraud = _compare(self.fraud_truth, self.fraud_covered, self.fraud_observed, self.fraud_replayed)
        out.update({f"fraud_{k}": v for k, v in fraud.items()})
        return out


@dataclass
class Records:
    """The records of a range of several partitions: codes, fraud flags, covered by an application."""
    codes: np.ndarray
    fraud: np.ndarray
    covered: np.ndarray

    @staticmethod
    def empty() -> "Records":
        return Records(np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, bool))


def covered(offsets: np.ndarray, p: int, applications: list[Application]) -> np.ndarray:
    """Which of one partition's `offsets` some application's range holds."""
    cover = np.zeros(len(offsets) + 1, dtype=np.int64)
    for app in applications:
        if p in app.ranges:
            a, b = app.ranges[p]
            cover[np.searchsorted(offsets, a, "left")] += 1
            cover[np.searchsorted(offsets, b, "left")] -= 1
    return np.cumsum(cover[:-1]) > 0


def records(parts: dict[int, Partition], start: dict[int, int], end: dict[int, int],
            applications: list[Application], keep=None) -> Records:
    """The records in [start, end) of every partition, marked covered by `applications`.
    `keep(part, slice) -> mask` leaves records out (a dead letter is no part of the truth)."""
    codes, fraud, cov = [], [], []
    for p, part in parts.items():
        cut = part.between(start.get(p, 0), end.get(p, 0))
        mask = keep(part, cut) if keep else slice(None)
        codes.append(part.codes[cut][mask])
        fraud.append(part.fraud[cut][mask])
        cov.append(covered(part.offsets[cut], p, applications)[mask])
    if not codes:
        return Records.empty()
    return Records(np.concatenate(codes), np.concatenate(fraud), np.concatenate(cov))


def _new(region: np.ndarray, history: np.ndarray) -> int:
    """Distinct codes of `region` not in `history`."""
    u = np.unique(region)
    return int(u.size - (np.isin(u, history).sum() if history.size and u.size else 0))


def count(region: Records, history: Records) -> Tally:
    """Distinct txn_ids of `region` that `history` (the same query's earlier records) has not
    counted already: an id that came twice in the input is one transaction of the truth."""
    r, h = region, history
    return Tally(truth=_new(r.codes, h.codes), covered=_new(r.codes[r.covered], h.codes[h.covered]),
                 fraud_truth=_new(r.codes[r.fraud], h.codes[h.fraud]),
                 fraud_covered=_new(r.codes[r.covered & r.fraud], h.codes[h.covered & h.fraud]))


def sums(applications: list[Application], seen: set) -> Tally:
    """The ledger's sums; an application whose key is in `seen` (added to as it goes) is a replay."""
    t = Tally()
    for app in applications:
        t.observed += app.processed
        t.fraud_observed += app.fraud
        if app.key in seen:
            t.replayed += app.processed
            t.fraud_replayed += app.fraud
        seen.add(app.key)
    return t


def lag(parts: dict[int, Partition], end: dict[int, int], now_ms: int) -> dict:
    """Records beyond the cut, and how long the oldest of them has waited (never lost)."""
    n, oldest = 0, None
    for p, part in parts.items():
        beyond = part.between(end.get(p, 0), None)
        n += beyond.stop - beyond.start
        if beyond.stop > beyond.start:
            t = int(part.times[beyond.start])
            oldest = t if oldest is None else min(oldest, t)
    return {"lag_records": n,
            "lag_seconds": round(max(0, now_ms - oldest) / 1000, 1) if oldest is not None else 0.0}


def figures(parts: dict[int, Partition], start: dict[int, int], end: dict[int, int],
            applications: list[Application], now_ms: int) -> dict:
    """Truth vs observed at the cut [start, end) for one sink; fraud figures alongside."""
    out = (count(records(parts, start, end, applications), Records.empty()) + sums(applications, set())).compare()
    out.update(lag(parts, end, now_ms), committed_offsets={str(p): o for p, o in sorted(end.items())})
    return out


def _compare(truth: int, covered: int, observed: int, replayed: int) -> dict:
    net = observed - replayed
    upstream = max(0, net - covered)
    lost = (truth - covered) + max(0, covered - net)
    return {"truth": truth, "observed": observed, "lost": lost, "duplicated": replayed + upstream,
            "replayed": replayed, "upstream": upstream}
