"""The fraud job's two paths on the same transactions (pure arithmetic over numpy arrays).

The real-time path (`decisions-rt`) runs at most once or at least once; the stateful path
(`decisions`, read_committed) is the accurate companion, exactly once. Every time here is a Kafka
LogAppendTime (the broker's clock, infra/topics.py), so a latency is one clock's difference:
decision appended - transaction appended.

Shared by `bench fraud-guarantees` (one kill, read back at the end) and the live auditor (every
few seconds, recorded for the Fraud page), so both report the same figures the same way:
- `episode`: what one fault did to the fast path — how long it emitted nothing, what it never
  decided (undecided), what it decided twice (replayed), its p99 in the minute after it came back,
  and how many of its gaps the accurate path decided, and how late;
- `buckets`: per path and per slice of arrival time, decided / undecided / latency.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

AFTER_RECOVERY_MS = 60_000   # "the minute after recovery": the window of p99_after_recovery_ms
# a transaction appended this shortly before a kill may have been inside the real-time query when it
# died (its p99 is tens of ms): an episode's range starts this much before the kill
IN_FLIGHT_MS = 1_000


@dataclass(frozen=True)
class Stamps:
    """One topic's records as (txn_id code, append time ms), in any order, and for decisions
    whether each said fraud (`fraud`; None when not known)."""
    codes: np.ndarray
    times: np.ndarray
    fraud: np.ndarray | None = None

    @staticmethod
    def of(pairs) -> "Stamps":
        pairs = list(pairs)
        return Stamps(np.asarray([c for c, _ in pairs], dtype=np.int64),
                      np.asarray([t for _, t in pairs], dtype=np.int64))

    @staticmethod
    def concat(parts: list["Stamps"]) -> "Stamps":
        if not parts:
            return Stamps(np.zeros(0, np.int64), np.zeros(0, np.int64))
        fraud = None if any(p.fraud is None for p in parts) else np.concatenate([p.fraud for p in parts])
        return Stamps(np.concatenate([p.codes for p in parts]), np.concatenate([p.times for p in parts]), fraud)

    def where(self, mask: np.ndarray) -> "Stamps":
        return Stamps(self.codes[mask], self.times[mask], None if self.fraud is None else self.fraud[mask])

    def flagged(self) -> np.ndarray | None:
        """The distinct codes some record of which said fraud (sorted; None when not known)."""
        return None if self.fraud is None else np.unique(self.codes[self.fraud])


@dataclass(frozen=True)
class First:
    """Per distinct txn code: its first append time and how many records it has (sorted by code)."""
    codes: np.ndarray
    first: np.ndarray
    count: np.ndarray

    def lookup(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(found mask, first append time or 0) for each of `codes`."""
        if len(self.codes) == 0:
            return np.zeros(len(codes), bool), np.zeros(len(codes), np.int64)
        i = np.clip(np.searchsorted(self.codes, codes), 0, len(self.codes) - 1)
        found = self.codes[i] == codes
        return found, np.where(found, self.first[i], 0)


def first(s: Stamps) -> First:
    if len(s.codes) == 0:
        z = np.zeros(0, np.int64)
        return First(z, z, z)
    order = np.lexsort((s.times, s.codes))
    codes, times = s.codes[order], s.times[order]
    uniq, start, count = np.unique(codes, return_index=True, return_counts=True)
    return First(uniq, times[start], count)


def pct(values: np.ndarray, q: float) -> int | None:
    """Nearest-rank percentile in whole ms (None for no values)."""
    if len(values) == 0:
        return None
    v = np.sort(values)
    return int(v[max(1, min(len(v), int(np.ceil(q / 100 * len(v))))) - 1])


def episode(tx: Stamps, rt: Stamps, acc: Stamps, killed_at: int, since: int, until: int,
            restarted_at: int | None, next_kill: int | None = None) -> dict:
    """What one kill at `killed_at` did to the real-time path, on the transactions appended in
    [since, until) (`since`: just before the kill; `until`: the newest transaction that had time
    to be decided, or the next kill), given when the real-time query was started again
    (`restarted_at`, the job's `fraud_rt_runs`; None: not yet).

    - recovered_at: the restarted query's first decision (None: not back yet) — not merely the first
      record after the kill: the killed driver's JVM may still append a few for a moment;
      down_ms = recovered_at - killed_at;
    - undecided: transactions in the range with no real-time decision (skipped, or lost in flight);
    - replayed: real-time records appended after the restart (before `next_kill`) for transactions
      already decided before it (a replay resends them);
    - p99_after_recovery_ms: p99 latency of the real-time records appended in the minute after
      recovery (a replay's backlog counts: each resent decision is a late alert);
    - filled_by_accurate: of the undecided, how many the stateful path decided; accurate_p99_ms /
      accurate_max_ms: how long after arriving those were decided by it.
    """
    tx_first, rt_first, acc_first = first(tx), first(rt), first(acc)
    in_range = (tx_first.first >= since) & (tx_first.first < until)
    codes, arrived = tx_first.codes[in_range], tx_first.first[in_range]
    decided, _ = rt_first.lookup(codes)
    gap, gap_arrived = codes[~decided], arrived[~decided]
    filled, acc_at = acc_first.lookup(gap)
    acc_latency = (acc_at - gap_arrived)[filled]
    after = rt.times[rt.times >= restarted_at] if restarted_at is not None else rt.times[:0]
    recovered_at = int(after.min()) if len(after) else None
    p99_after = None
    if recovered_at is not None:
        window = (rt.times >= recovered_at) & (rt.times < recovered_at + AFTER_RECOVERY_MS)
        found, tx_at = tx_first.lookup(rt.codes[window])
        p99_after = pct((rt.times[window] - tx_at)[found], 99)
    replayed = 0
    if restarted_at is not None:
        later = (rt.times >= restarted_at) & (rt.times < (next_kill if next_kill is not None else 1 << 62))
        replayed = int(np.isin(rt.codes[later], rt.codes[rt.times < restarted_at]).sum())
    return {"killed_at": int(killed_at), "recovered_at": recovered_at,
            "down_ms": None if recovered_at is None else recovered_at - int(killed_at),
            "transactions": int(len(codes)), "undecided": int(len(gap)), "replayed": replayed,
            "p99_after_recovery_ms": p99_after, "filled_by_accurate": int(filled.sum()),
            "accurate_p99_ms": pct(acc_latency, 99), "accurate_max_ms": int(acc_latency.max()) if len(acc_latency) else None}


def buckets(tx: Stamps, rt: Stamps, acc: Stamps, since: int, settled_before: int, bucket_ms: int,
            starts: dict | None = None) -> list[dict]:
    """Per path ("real-time", "stateful") and per `bucket_ms` slice of arrival time from `since`:
    transactions, decided (distinct), duplicated (records beyond the first), latency p50/p99/max of
    each transaction's first decision. `undecided` is counted only for transactions that arrived
    before `settled_before` (younger ones may still be on their way: None in a bucket holding them);
    for the real-time path `filled` is how many of its undecided the stateful path decided.
    `starts` {path: ms or None}: a path is judged only on transactions from then on (None: not at all).
    When both paths' fraud flags are known, a real-time slice also has `alerts` (transactions the
    real-time path flagged and the stateful path has decided) and `confirmed` (of those, the ones
    the stateful path flagged too); else they are None."""
    tx_first = first(tx)
    keep = tx_first.first >= since
    codes, arrived = tx_first.codes[keep], tx_first.first[keep]
    slot = (arrived - since) // bucket_ms
    out = []
    acc_first = first(acc)
    acc_found, _ = acc_first.lookup(codes)
    rt_flagged, acc_flagged = rt.flagged(), acc.flagged()
    checked = rt_flagged is not None and acc_flagged is not None
    alert = np.isin(codes, rt_flagged) & acc_found if checked else None
    confirmed = alert & np.isin(codes, acc_flagged) if checked else None
    for path, stamps in (("real-time", rt), ("stateful", acc)):
        begin = (starts or {}).get(path, since)
        if begin is None:
            continue
        f = first(stamps)
        found, at = f.lookup(codes)
        i = np.clip(np.searchsorted(f.codes, codes), 0, max(0, len(f.codes) - 1))
        extra = np.where(found, f.count[i] - 1, 0) if len(f.codes) else np.zeros(len(codes), np.int64)
        latency = at - arrived
        judged = arrived >= begin
        for b in np.unique(slot[judged]):
            m = (slot == b) & judged
            start = since + int(b) * bucket_ms
            lat = latency[m & found]
            settled = start + bucket_ms <= settled_before
            missing = m & ~found
            out.append({"path": path, "bucket": start, "transactions": int(m.sum()), "decided": int((m & found).sum()),
                        "undecided": int(missing.sum()) if settled else None, "duplicated": int(extra[m].sum()),
                        "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "max_ms": int(lat.max()) if len(lat) else None,
                        "filled": int((missing & acc_found).sum()) if path == "real-time" and settled else None,
                        "alerts": int((m & alert).sum()) if path == "real-time" and checked else None,
                        "confirmed": int((m & confirmed).sum()) if path == "real-time" and checked else None})
    return out


def survey(tx: Stamps, rt: Stamps, acc: Stamps, runs: list, faults: list, now: int, bucket_ms: int,
           undecided_after_ms: int, minutes: float) -> dict:
    """What the live auditor records: {"buckets": the paths' slices over the last `minutes`,
    "gaps": one episode per kill or restart}. `runs` are (started_at, guarantee) of the real-time
    query's starts, `faults` (command id, kind, started_at) of the commands that killed or
    restarted the job, oldest first. The real-time path is judged from the first transaction it
    decided (before, it was not running); a kill before any real-time start is no episode of it.
    An episode's guarantee is that of the start after the kill (the restart is what skips or
    replays), else the one it was killed under."""
    since = (now - int(minutes * 60_000)) // bucket_ms * bucket_ms
    settled = now - undecided_after_ms
    found, _ = first(rt).lookup(tx.codes)
    rt_since = int(tx.times[found].min()) if found.any() else None
    rows = buckets(tx, rt, acc, since, settled, bucket_ms, starts={"real-time": rt_since})
    gaps = []
    for k, (cid, kind, killed_at) in enumerate(faults):
        before = [g for at, g in runs if at <= killed_at]
        if rt_since is None or not before:
            continue
        after = [(at, g) for at, g in runs if at > killed_at]
        until = faults[k + 1][2] - IN_FLIGHT_MS if k + 1 < len(faults) else settled
        fig = episode(tx, rt, acc, killed_at, killed_at - IN_FLIGHT_MS, until, after[0][0] if after else None,
                      faults[k + 1][2] if k + 1 < len(faults) else None)
        gaps.append({"command_id": cid, "kind": kind, "guarantee": after[0][1] if after else before[-1], **fig})
    return {"buckets": rows, "gaps": gaps}
