"""The auditor: truth from Kafka against each job and guarantee, at a consistent cut (see the
package's docstring for what each figure means).

`Auditor.snapshot` reads each query's committed position, then the sinks, then the topics, and
hands them to the cuts (`pipelines.audit.folds`) and the paths' survey (`pipelines.audit.paths`);
the transactions the input contract rejects (`infra.contracts.dead_letter_reason`, the contract's
Python mirror) are indexed as dead letters, never as truth.
"""
from __future__ import annotations

import json

import numpy as np

from controlplane.clock import now_ms
from controlplane.store import connect
from infra.config import Settings, load
from infra.contracts import dead_letter_reason
from infra.histories import REPLAY_HEADER
from pipelines import guarantees
from pipelines.audit import paths as path_figures
from pipelines.audit.cut import lag
from pipelines.audit.folds import Duplicates, FraudCut, UsageCut, application, ledger_rows
from pipelines.audit.topics import INVALID, Lookup, TopicIndex, code
from pipelines.engine import checkpoints

FRAUD = "fraud"
# the commands that kill or restart the fraud job, and so its real-time query
RT_FAULTS = ("crash", "zombie", "set-fraud-guarantee")
# a label or a decision is appended this much before or after its transaction at most: what the
# fraud cut has not folded is kept with this much around it
MARGIN_MS = 60_000
LOOKUP_CHUNK = 500          # txn_ids per store lookup (SQLite's parameter limit is higher)


class Auditor:
    def __init__(self, s: Settings | None = None, db=None, persist: bool = False):
        """`persist`: save the cuts after every snapshot (the live auditor; there is one). Any
        auditor resumes from the saved cuts."""
        self.s = s or load()
        self.db = db or connect(self.s.store_path)
        self.persist = persist
        self.horizon_ms = int(self.s.audit_horizon_minutes * 60_000)
        # the paths' slices and episodes are recomputed over the horizon less a margin, so a slice
        # is never recomputed from records partly forgotten (the store keeps the older ones)
        self.paths_minutes = max(0.0, (self.horizon_ms - MARGIN_MS) / 60_000)
        t = self.s.topics
        self.label_log = TopicIndex(self.s, t.labels, on_doc=_bad_label)
        self.transactions = TopicIndex(self.s, t.transactions, reject=self._invalid)
        self.decisions = TopicIndex(self.s, t.decisions)
        self.decisions_rt = TopicIndex(self.s, t.decisions_rt)
        self.cuts = {g: UsageCut(g) for g in guarantees.POLICIES}
        self.fraud_cut = FraudCut()
        self.duplicates = Duplicates()
        self._resumed = not self._load()

    # -- the saved cuts ---------------------------------------------------------------------------
    def _load(self) -> bool:
        rows = dict(self.db.execute("SELECT name, state FROM audit_cuts").fetchall())
        for g in self.cuts:
            if f"usage:{g}" in rows:
                self.cuts[g] = UsageCut.from_json(rows[f"usage:{g}"])
        if "fraud" in rows:
            self.fraud_cut = FraudCut.from_json(rows["fraud"])
        if "fraud:duplicates" in rows:
            self.duplicates = Duplicates.from_json(rows["fraud:duplicates"])
        return bool(rows)

    def _save(self, now: int) -> None:
        rows = [{"name": f"usage:{g}", "state": c.to_json(), "updated_at": now} for g, c in self.cuts.items()]
        rows += [{"name": "fraud", "state": self.fraud_cut.to_json(), "updated_at": now},
                 {"name": "fraud:duplicates", "state": self.duplicates.to_json(), "updated_at": now}]
        self.db["audit_cuts"].upsert_all(rows, pk="name", alter=False)

    def _keep_since(self, now: int) -> int:
        """Records appended before this are forgotten (unless a cut has not folded them)."""
        since = now - self.horizon_ms
        if self.fraud_cut.since_ms is not None:
            since = min(since, self.fraud_cut.since_ms - MARGIN_MS)
        return since

    def _lowest_usage_fold(self) -> dict:
        """{partition: the lowest offset the usage cuts have folded to}: the floors of the decisions'
        index (TopicIndex.start_at, trim), so a decision some cut has not folded yet is kept."""
        folds = [c.fold for c in self.cuts.values() if c.fold]
        return {p: min(f[p] for f in folds if p in f) for p in {p for f in folds for p in f}}

    def _resume(self, now: int) -> None:
        """After a restart: read the topics from the horizon (or a cut's unfolded records), and
        take back the ledger's recent applications each usage cut folded."""
        since = self._keep_since(now)
        self.transactions.start_at(since, self.fraud_cut.fold)
        self.decisions.start_at(since, self._lowest_usage_fold())
        self.label_log.start_at(since)
        self.decisions_rt.start_at(since)
        topic = self.s.topics.decisions
        for g, cut in self.cuts.items():
            rows = [dict(r) for r in self.db.query(
                "SELECT * FROM sink_batches WHERE sink = ? AND outcome = 'applied' AND ts >= ? ORDER BY id",
                [guarantees.POLICIES[g].query, since])]
            done = set(cut.folded_ids)
            cut.recent = [application(r, topic) for r in rows if r["id"] <= cut.ledger_pos or r["id"] in done]
        self._resumed = True

    # -- input contract and labels ----------------------------------------------------------------
    def _invalid(self, value: bytes | None, appended_at: int, headers=()) -> bool:
        """Whether the fraud job's input contract rejects this transaction (it goes to the dead
        letters, so it is no part of the truth). The contract's Python mirror, judged at the
        record's append time (the job judges it at its batch's time: the same outside the window's
        edges), by the replay's rules when the record carries the replay header (`headers`: the
        record's (key, value) pairs). Labels alone miss a malformed record whose readable txn_id
        is not its label's."""
        replay = any(key == REPLAY_HEADER for key, _ in headers)
        return dead_letter_reason(value, now_ms=appended_at, past_ms=self.s.validation_past_seconds * 1000,
                                  future_ms=self.s.validation_future_seconds * 1000, replay=replay) is not None

    def _checkpoint(self, name: str):
        return self.s.checkpoint_root / name

    # -- the cuts ---------------------------------------------------------------------------------
    def usage(self, policy: guarantees.Guarantee, pos: checkpoints.Position, rows: list[dict], now: int) -> dict:
        topic = self.s.topics.decisions
        first = self.db.execute("SELECT offsets, started_at FROM usage_starts WHERE guarantee = ? AND topic = ?",
                                [policy.name, topic]).fetchone()
        signature = f"start:{first[1]}" if first else (f"checkpoint:{pos.query_id}" if pos.query_id else None)
        cut = self.cuts[policy.name]
        if signature and cut.signature and cut.signature != signature:  # the sink was reset
            cut = self.cuts[policy.name] = UsageCut(policy.name)
            rows = ledger_rows(self.db, policy.query, 0)
        if signature and not cut.signature:
            initial = checkpoints.initial_offsets(self._checkpoint(policy.query)).get(topic, {})
            cut.signature = signature
            cut.start = {int(p): int(o) for p, o in json.loads(first[0]).items()} if first else initial
            cut.fold = dict(cut.start)
        committed = pos.committed_offsets.get(topic, {}) if cut.signature else {}
        out = cut.update(self.decisions.partitions(), self.decisions.positions, topic, rows, pos.query_id,
                         pos.committed_batch, committed, now)
        out.update(checkpoint_id=pos.query_id, committed_batch=pos.committed_batch,
                   sink_total=guarantees.counts(self.db).get(policy.name, {}).get("processed", 0))
        return out

    def fraud(self, pos: checkpoints.Position, now: int, labels: Lookup) -> dict:
        topic = self.s.topics.transactions
        cut = self.fraud_cut
        if pos.query_id and cut.checkpoint_id != pos.query_id:  # first seen, or a new checkpoint
            start = checkpoints.initial_offsets(self._checkpoint(FRAUD) / "decisions").get(topic, {})
            cut = self.fraud_cut = FraudCut(pos.query_id, dict(start), dict(start))
        end = pos.committed_offsets.get(topic, {}) if cut.checkpoint_id else {}
        poison = np.fromiter(self._poison(self._keep_since(now)), np.int64)
        decided_codes = np.concatenate([p.codes for p in self.decisions.partitions().values()] or [np.zeros(0, np.int64)])

        def valid(part, cut_slice):
            codes = part.codes[cut_slice]
            return (codes != INVALID) & ~labels.find(codes)[2] & ~np.isin(codes, poison)

        def label(codes):
            return labels.find(codes)[:2]

        cut.update(self.transactions.partitions(), self.transactions.positions, end, valid,
                   self.transactions.take_ids, self._decided, lambda c: np.isin(c, decided_codes), label)
        behind = lag(self.transactions.partitions(), end, now)
        tp, fp, fn = cut.tp, cut.fp, cut.fn
        return {
            "truth": cut.truth, "observed": cut.observed, "lost": cut.truth - cut.observed,
            "topic": cut.topic, "topic_lost": cut.truth - cut.topic, "duplicated": self.duplicates.duplicated,
            "precision": round(tp / (tp + fp), 4) if tp + fp else None,
            "recall": round(tp / (tp + fn), 4) if tp + fn else None,
            **behind, "committed_offsets": {str(p): o for p, o in sorted(end.items())},
            "checkpoint_id": pos.query_id, "committed_batch": pos.committed_batch,
        }

    def _decided(self, txn_ids: list[str]) -> dict[str, bool]:
        """The store's decisions of these transactions (txn_id -> is_fraud)."""
        out = {}
        for i in range(0, len(txn_ids), LOOKUP_CHUNK):
            chunk = txn_ids[i:i + LOOKUP_CHUNK]
            marks = ",".join("?" for _ in chunk)
            out.update((t, bool(f)) for t, f in self.db.execute(
                f"SELECT txn_id, is_fraud FROM decisions WHERE txn_id IN ({marks})", chunk).fetchall())
        return out

    def snapshot(self) -> dict:
        """Truth vs observed for the fraud job and each usage guarantee, as one dict.

        The order makes the cut consistent: each query's committed position first, then the sinks
        (everything up to a committed batch was written before its commit), then the topics,
        read to their ends now, which lie at or beyond every committed offset.
        """
        fraud_pos = checkpoints.position(self._checkpoint(FRAUD) / "decisions")
        usage_pos = {g: checkpoints.position(self._checkpoint(p.query)) for g, p in guarantees.POLICIES.items()}
        ledgers = {g: ledger_rows(self.db, p.query, self.cuts[g].ledger_pos) for g, p in guarantees.POLICIES.items()}
        now = now_ms()
        if not self._resumed:
            self._resume(now)
        self.label_log.read()
        self.transactions.read()
        self.decisions.read()
        self.decisions_rt.read()
        self.duplicates.update(self.decisions.partitions())
        labels = Lookup(self.label_log)
        snap = {"fraud": self.fraud(fraud_pos, now, labels),
                "usage": {g: self.usage(p, usage_pos[g], ledgers[g], now) for g, p in guarantees.POLICIES.items()},
                "paths": self.paths(now, labels)}
        self._trim(now)
        if self.persist:
            self._save(now)
        return snap

    def _trim(self, now: int) -> None:
        since = self._keep_since(now)
        self.transactions.trim(since, self.fraud_cut.fold)
        self.decisions.trim(since, self._lowest_usage_fold())
        self.label_log.trim(since)
        self.decisions_rt.trim(now - self.horizon_ms)   # only the paths read it
        for cut in self.cuts.values():
            cut.forget(since)

    def held(self) -> dict:
        """Records each topic index holds in memory now."""
        return {i.topic: i.held() for i in (self.label_log, self.transactions, self.decisions, self.decisions_rt)}

    def _stamps(self, index: TopicIndex, keep=None) -> path_figures.Stamps:
        parts = list(index.partitions().values())
        s = path_figures.Stamps.concat([path_figures.Stamps(p.codes, p.times, p.fraud) for p in parts])
        return s.where(keep(s.codes)) if keep is not None else s

    def paths(self, now: int, labels: Lookup) -> dict:
        """The two paths over the last `paths_minutes` and what each kill or restart of the fraud job
        did to the real-time path (`pipelines.audit.paths.survey`), with the starts of the
        real-time query the job recorded (`fraud_rt_runs`) and the commands that killed it."""
        def transaction(codes):
            return (codes != INVALID) & ~labels.find(codes)[2]

        tx, rt, acc = (self._stamps(self.transactions, transaction), self._stamps(self.decisions_rt),
                       self._stamps(self.decisions))
        runs = self.db.execute("SELECT started_at, guarantee FROM fraud_rt_runs ORDER BY started_at").fetchall()
        marks = ",".join("?" for _ in RT_FAULTS)
        faults = self.db.execute(
            f"SELECT id, kind, started_at FROM commands WHERE kind IN ({marks}) AND status = 'done' "
            f"AND (job = ? OR kind = 'set-fraud-guarantee') AND started_at > ? ORDER BY started_at",
            [*RT_FAULTS, FRAUD, now - int(self.paths_minutes * 60_000)]).fetchall()
        return path_figures.survey(tx, rt, acc, runs, faults, now, int(self.s.audit_interval_seconds * 1000),
                                   int(self.s.fraud_undecided_after_seconds * 1000), self.paths_minutes)

    def _poison(self, since: int) -> set:
        """Codes of the transactions the poison-batch rule dead-lettered (`quarantines`) lately."""
        return {code(r["txn_id"])
                for (text,) in self.db.execute("SELECT records FROM quarantines WHERE job = ? AND status = ? "
                                               "AND coalesce(done_at, created_at) >= ?",
                                               [FRAUD, "dead-lettered", since]).fetchall()
                for r in json.loads(text or "[]") if isinstance(r, dict) and isinstance(r.get("txn_id"), str)}


def _bad_label(doc: dict) -> bool:
    return str(doc.get("pattern") or "").startswith("bad:")


def snapshot(s: Settings | None = None, db=None) -> dict:
    return Auditor(s, db).snapshot()
