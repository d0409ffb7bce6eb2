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

from dataclasses import dataclass

import numpy as np


@dataclass
class Partition:
    """One partition's records, sorted by offset: offsets, txn_id codes, fraud flags, append times."""
    offsets: np.ndarray
    codes: np.ndarray
    fraud: np.ndarray
    times: np.ndarray

    def between(self, start: int, end: int | None) -> slice:
        lo = int(np.searchsorted(self.offsets, start, "left"))
        hi = len(self.offsets) if end is None else int(np.searchsorted(self.offsets, end, "left"))
        return slice(lo, max(lo, hi))


@dataclass(frozen=True)
class Application:
    """One ledger record of a batch the sink applied."""
    key: tuple                        # (checkpoint id, batch id): a replay repeats it
    processed: int
    fraud: int
    ranges: dict                      # {partition: (start, end)} of the input topic


def figures(parts: dict[int, Partition], start: dict[int, int], end: dict[int, int],
            applications: list[Application], now_ms: int) -> dict:
    """Truth vs observed at the cut [start, end) for one sink; fraud figures alongside."""
    in_codes, in_fraud, cov_codes, cov_fraud = [], [], [], []
    lag_records, oldest_lag = 0, None
    for p, part in parts.items():
        cut = part.between(start.get(p, 0), end.get(p, 0))
        codes, fraud, offsets = part.codes[cut], part.fraud[cut], part.offsets[cut]
        in_codes.append(codes)
        in_fraud.append(fraud)
        cover = np.zeros(len(offsets) + 1, dtype=np.int64)
        for app in applications:
            if p in app.ranges:
                a, b = app.ranges[p]
                cover[np.searchsorted(offsets, a, "left")] += 1
                cover[np.searchsorted(offsets, b, "left")] -= 1
        covered = np.cumsum(cover[:-1]) > 0
        cov_codes.append(codes[covered])
        cov_fraud.append(fraud[covered])
        beyond = part.between(end.get(p, 0), None)
        lag_records += beyond.stop - beyond.start
        if beyond.stop > beyond.start:
            t = int(part.times[beyond.start])
            oldest_lag = t if oldest_lag is None else min(oldest_lag, t)
    cat = (lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dtype=dt))
    in_codes, in_fraud = cat(in_codes, np.int64), cat(in_fraud, bool)
    cov_codes, cov_fraud = cat(cov_codes, np.int64), cat(cov_fraud, bool)

    seen: set = set()
    observed = fraud_observed = replayed = replayed_fraud = 0
    for app in applications:
        observed += app.processed
        fraud_observed += app.fraud
        if app.key in seen:
            replayed += app.processed
            replayed_fraud += app.fraud
        seen.add(app.key)
    out = _compare(np.unique(in_codes).size, np.unique(cov_codes).size, observed, replayed)
    fraud = _compare(np.unique(in_codes[in_fraud]).size, np.unique(cov_codes[cov_fraud]).size,
                     fraud_observed, replayed_fraud)
    out.update({f"fraud_{k}": v for k, v in fraud.items()})
    out.update(lag_records=lag_records,
               lag_seconds=round(max(0, now_ms - oldest_lag) / 1000, 1) if oldest_lag is not None else 0.0,
               committed_offsets={str(p): o for p, o in sorted(end.items())})
    return out


def _compare(truth: int, covered: int, observed: int, replayed: int) -> dict:
    net = observed - replayed
    upstream = max(0, net - covered)
    lost = (truth - covered) + max(0, covered - net)
    return {"truth": truth, "observed": observed, "lost": lost, "duplicated": replayed + upstream,
            "replayed": replayed, "upstream": upstream}
