"""Truth you can check: each job and guarantee against what Kafka holds, at a consistent cut.

    python -m pipelines.audit [--json] [--record]

For each usage query (one per guarantee): truth is the distinct txn_ids in its input topic
(`decisions`, read_committed) from where the query first started reading up to the offsets it
has committed (Spark's offset and commit logs, `pipelines.engine.checkpoints`); observed is what
its sink applied for the batches up to that commit (the sink ledger, `controlplane.ledger`).
Lost and duplicated are exact at every audit and never include lag; lag (records and seconds
beyond the committed offsets) is reported on its own. Duplicates are split into `replayed` (a
batch the query applied twice) and `upstream` (one txn_id twice in the input). See
`pipelines.audit.cut` for the arithmetic.

For the fraud job: truth is the distinct valid txn_ids in `transactions` up to its committed
offsets (malformed ones, labelled `bad:<kind>`, and the records the poison-batch rule
dead-lettered, go to the dead letters); observed is the store's
decisions of batches up to its commit, and `topic` the distinct txn_ids in `decisions`
(read_committed), whose records beyond one per txn_id are its duplicates. Precision and recall
of the decided transactions against the `labels` topic ride along.

For the fraud job's two paths (`paths`): per slice of arrival time, what the real-time path
(`decisions-rt`) and the stateful path (`decisions`) decided and how fast, and for each kill or
restart of the job what its real-time guarantee did (`pipelines.audit.paths`).

`Auditor` keeps what it has read between snapshots, so the supervisor's live auditor reads each
topic incrementally.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from controlplane import ledger
from controlplane.clock import now_ms
from infra.config import Settings, load
from pipelines import guarantees
from pipelines.audit import paths as path_figures
from pipelines.audit.cut import Application, figures
from pipelines.audit.topics import INVALID, Ids, TopicIndex
from pipelines.engine import checkpoints
from simulator.patterns import dead_letter_reason

FRAUD = "fraud"
PATHS_MINUTES = 30          # how far back the paths are recomputed each audit (the Fraud page's span)
# the commands that kill or restart the fraud job, and so its real-time query
RT_FAULTS = ("crash", "zombie", "set-fraud-guarantee")


@dataclass
class _Labels:
    fraud: dict      # code -> is_fraud
    bad: set         # codes of malformed inputs


def _ranges(offsets_json: str | None, topic: str) -> dict[int, int]:
    try:
        doc = json.loads(offsets_json or "{}")
    except ValueError:
        return {}
    return {int(p): int(o) for p, o in (doc.get(topic) or {}).items()}


def applications(rows: list[dict], topic: str, checkpoint_id: str | None, committed: int | None) -> list[Application]:
    """The ledger's applied batches inside the cut: every batch of older checkpoints, and those of
    the current checkpoint up to its committed batch (later ones are ahead of the cut)."""
    out = []
    for r in rows:
        if r["outcome"] != ledger.APPLIED:
            continue
        if r["checkpoint_id"] == checkpoint_id and (committed is None or r["batch_id"] > committed):
            continue
        start, end = _ranges(r["start_offsets"], topic), _ranges(r["end_offsets"], topic)
        out.append(Application((r["checkpoint_id"], r["batch_id"]), r["processed"] or 0, r["fraud"] or 0,
                               {p: (start.get(p, 0), e) for p, e in end.items()}))
    return out


class Auditor:
    def __init__(self, s: Settings | None = None, db=None):
        from controlplane.store import connect

        self.s = s or load()
        self.db = db or connect(self.s.store_path)
        self.ids = Ids()
        t = self.s.topics
        self.labels = _Labels({}, set())
        self.decisions = TopicIndex(self.s, t.decisions, self.ids)
        self.transactions = TopicIndex(self.s, t.transactions, self.ids, reject=self._invalid)
        self.label_log = TopicIndex(self.s, t.labels, self.ids, on_doc=self._label)
        self.decisions_rt = TopicIndex(self.s, t.decisions_rt, self.ids)
        self._store_rowid = 0
        self._store: dict[int, tuple[int, bool]] = {}   # code -> (batch_id, is_fraud)

    def _invalid(self, value: bytes | None, appended_at: int) -> bool:
        """Whether the fraud job's input contract rejects this transaction (it goes to the dead
        letters, so it is no part of the truth). The contract's Python mirror, judged at the
        record's append time (the job judges it at its batch's time: the same outside the window's
        edges). Labels alone miss a malformed record whose readable txn_id is not its label's."""
        return dead_letter_reason(value, now_ms=appended_at, past_ms=self.s.validation_past_seconds * 1000,
                                  future_ms=self.s.validation_future_seconds * 1000) is not None

    def _label(self, doc: dict) -> None:
        code = self.ids.code(doc["txn_id"])
        self.labels.fraud[code] = bool(doc.get("is_fraud"))
        if str(doc.get("pattern") or "").startswith("bad:"):
            self.labels.bad.add(code)

    def _checkpoint(self, name: str):
        return self.s.checkpoint_root / name

    def usage(self, policy: guarantees.Guarantee, pos: checkpoints.Position, rows: list[dict], now: int) -> dict:
        topic = self.s.topics.decisions
        apps = applications(rows, topic, pos.query_id, pos.committed_batch)
        first = self.db.execute("SELECT offsets FROM usage_starts WHERE guarantee = ? AND topic = ?",
                                [policy.name, topic]).fetchone()
        initial = checkpoints.initial_offsets(self._checkpoint(policy.query)).get(topic, {})
        start = {int(p): int(o) for p, o in json.loads(first[0]).items()} if first else initial
        end = checkpoints.merge_max({topic: pos.committed_offsets.get(topic, {})},
                                    *({topic: {p: b for p, (_, b) in a.ranges.items()}} for a in apps)).get(topic, {})
        out = figures(self.decisions.partitions(), start, end, apps, now)
        out.update(checkpoint_id=pos.query_id, committed_batch=pos.committed_batch,
                   sink_total=guarantees.counts(self.db).get(policy.name, {}).get("processed", 0))
        return out

    def fraud(self, pos: checkpoints.Position, now: int) -> dict:
        topic = self.s.topics.transactions
        checkpoint = self._checkpoint(FRAUD) / "decisions"
        start = checkpoints.initial_offsets(checkpoint).get(topic, {})
        end = pos.committed_offsets.get(topic, {})
        truth, lag_records, oldest = set(), 0, None
        for p, part in self.transactions.partitions().items():
            truth.update(part.codes[part.between(start.get(p, 0), end.get(p, 0))].tolist())
            beyond = part.between(end.get(p, 0), None)
            lag_records += beyond.stop - beyond.start
            if beyond.stop > beyond.start:
                oldest = min(oldest or 1 << 62, int(part.times[beyond.start]))
        truth -= self.labels.bad
        truth.discard(INVALID)
        truth -= self._poison()  # dead-lettered by the poison-batch rule: accounted, never decided
        committed = pos.committed_batch if pos.committed_batch is not None else -1
        decided = {c: f for c, (b, f) in self._store.items() if b is not None and b <= committed}
        parts = [part.codes for part in self.decisions.partitions().values()]
        codes, counts = np.unique(np.concatenate(parts) if parts else np.zeros(0, np.int64), return_counts=True)
        in_topic = dict(zip(codes.tolist(), counts.tolist()))
        tp = sum(1 for c, f in decided.items() if f and self.labels.fraud.get(c))
        fp = sum(1 for c, f in decided.items() if f and c in self.labels.fraud and not self.labels.fraud[c])
        fn = sum(1 for c, f in decided.items() if not f and self.labels.fraud.get(c))
        return {
            "truth": len(truth), "observed": len(decided.keys() & truth), "lost": len(truth - decided.keys()),
            "topic": len(in_topic.keys() & truth), "topic_lost": len(truth - in_topic.keys()),
            "duplicated": sum(n - 1 for n in in_topic.values()),
            "precision": round(tp / (tp + fp), 4) if tp + fp else None,
            "recall": round(tp / (tp + fn), 4) if tp + fn else None,
            "lag_records": lag_records,
            "lag_seconds": round(max(0, now - oldest) / 1000, 1) if oldest is not None else 0.0,
            "committed_offsets": {str(p): o for p, o in sorted(end.items())},
            "checkpoint_id": pos.query_id, "committed_batch": pos.committed_batch,
        }

    def snapshot(self) -> dict:
        """Truth vs observed for the fraud job and each usage guarantee, as one dict.

        The order makes the cut consistent: each query's committed position first, then the sinks
        (everything up to a committed batch was written before its commit), then the topics,
        read to their ends now, which lie at or beyond every committed offset.
        """
        fraud_pos = checkpoints.position(self._checkpoint(FRAUD) / "decisions")
        usage_pos = {g: checkpoints.position(self._checkpoint(p.query)) for g, p in guarantees.POLICIES.items()}
        ledgers = {g: ledger.batches(self.db, p.query) for g, p in guarantees.POLICIES.items()}
        self._read_store()
        self.label_log.read()
        self.transactions.read()
        self.decisions.read()
        self.decisions_rt.read()
        now = now_ms()
        return {"fraud": self.fraud(fraud_pos, now),
                "usage": {g: self.usage(p, usage_pos[g], ledgers[g], now) for g, p in guarantees.POLICIES.items()},
                "paths": self.paths(now)}

    def _stamps(self, index: TopicIndex, drop: set | None = None) -> path_figures.Stamps:
        parts = index.partitions().values()
        s = path_figures.Stamps.concat([path_figures.Stamps(p.codes, p.times) for p in parts])
        if drop:
            keep = ~np.isin(s.codes, np.fromiter(drop, np.int64, len(drop)))
            s = path_figures.Stamps(s.codes[keep], s.times[keep])
        return s

    def paths(self, now: int) -> dict:
        """The two paths over the last PATHS_MINUTES and what each kill or restart of the fraud job
        did to the real-time path (`pipelines.audit.paths.survey`), with the starts of the
        real-time query the job recorded (`fraud_rt_runs`) and the commands that killed it."""
        tx, rt, acc = (self._stamps(self.transactions, self.labels.bad | {INVALID}), self._stamps(self.decisions_rt),
                       self._stamps(self.decisions))
        runs = self.db.execute("SELECT started_at, guarantee FROM fraud_rt_runs ORDER BY started_at").fetchall()
        marks = ",".join("?" for _ in RT_FAULTS)
        faults = self.db.execute(
            f"SELECT id, kind, started_at FROM commands WHERE kind IN ({marks}) AND status = 'done' "
            f"AND (job = ? OR kind = 'set-fraud-guarantee') AND started_at > ? ORDER BY started_at",
            [*RT_FAULTS, FRAUD, now - PATHS_MINUTES * 60_000]).fetchall()
        return path_figures.survey(tx, rt, acc, runs, faults, now, int(self.s.audit_interval_seconds * 1000),
                                   int(self.s.fraud_undecided_after_seconds * 1000), PATHS_MINUTES)

    def _poison(self) -> set:
        """Codes of the transactions the poison-batch rule dead-lettered (`quarantines`)."""
        return {self.ids.code(r["txn_id"])
                for (text,) in self.db.execute("SELECT records FROM quarantines WHERE job = ? AND status = ?",
                                               [FRAUD, "dead-lettered"]).fetchall()
                for r in json.loads(text or "[]")}

    def _read_store(self) -> None:
        """The store's decisions since the last read (txn_id -> batch id, is_fraud)."""
        for rowid, txn_id, batch_id, fraud in self.db.execute(
                "SELECT rowid, txn_id, batch_id, is_fraud FROM decisions WHERE rowid > ? ORDER BY rowid",
                [self._store_rowid]).fetchall():
            self._store[self.ids.code(txn_id)] = (batch_id, bool(fraud))
            self._store_rowid = rowid


def snapshot(s: Settings | None = None, db=None) -> dict:
    return Auditor(s, db).snapshot()


_ROW = ("truth", "observed", "lost", "duplicated", "replayed", "upstream", "lag_records", "lag_seconds",
        "sink_total", "checkpoint_id", "committed_batch")


def record(db, snap: dict, ts: int | None = None) -> int:
    """Append one snapshot to the `audit` table (one row per job, guarantee and metric)."""
    ts = ts or now_ms()
    f = snap["fraud"]
    rows = [{"ts": ts, "job": "fraud", "guarantee": "", "metric": "decisions",
             **{k: f.get(k) for k in _ROW}, "committed_offsets": json.dumps(f["committed_offsets"])},
            {"ts": ts, "job": "fraud", "guarantee": "", "metric": "topic", "truth": f["truth"],
             "observed": f["topic"], "lost": f["topic_lost"], "duplicated": f["duplicated"]}]
    for metric in ("precision", "recall"):  # the ratio itself in `observed` (the dashboard reads it so)
        if f.get(metric) is not None:
            rows.append({"ts": ts, "job": "fraud", "guarantee": "", "metric": metric, "observed": f[metric]})
    for g, u in snap["usage"].items():
        common = {"ts": ts, "job": "usage", "guarantee": g, "committed_offsets": json.dumps(u["committed_offsets"]),
                  "lag_records": u["lag_records"], "lag_seconds": u["lag_seconds"],
                  "checkpoint_id": u["checkpoint_id"], "committed_batch": u["committed_batch"]}
        rows.append({**common, "metric": "processed", **{k: u[k] for k in _ROW if k in u}})
        rows.append({**common, "metric": "fraud", **{k: u[f"fraud_{k}"] for k in
                                                     ("truth", "observed", "lost", "duplicated", "replayed", "upstream")}})
    db["audit"].upsert_all(rows, pk=("ts", "job", "guarantee", "metric"), alter=False)
    if snap.get("paths"):
        record_paths(db, snap["paths"], ts)
    return len(rows)


def record_paths(db, paths: dict, ts: int) -> None:
    """Upsert the paths' slices and episodes (a slice or an episode changes while replays land)."""
    db["fraud_paths"].upsert_all([{**r, "updated_at": ts} for r in paths["buckets"]], pk=("path", "bucket"),
                                 alter=False)
    db["fraud_rt_gaps"].upsert_all([{**g, "updated_at": ts} for g in paths["gaps"]], pk="command_id", alter=False)


def render(snap: dict) -> str:
    f = snap["fraud"]
    lines = [f"fraud: truth {f['truth']}, decided {f['observed']} (store) / {f['topic']} (topic), "
             f"lost {f['lost']}, duplicated {f['duplicated']}, behind {f['lag_records']} "
             f"({f['lag_seconds']} s), precision {f['precision']}, recall {f['recall']}"]
    for g, u in snap["usage"].items():
        lines.append(f"usage {g}: truth {u['truth']}, observed {u['observed']}, lost {u['lost']}, "
                     f"duplicated {u['duplicated']} (replayed {u['replayed']}, upstream {u['upstream']}), "
                     f"behind {u['lag_records']} ({u['lag_seconds']} s); fraud {u['fraud_observed']} of "
                     f"{u['fraud_truth']}")
    return "\n".join(lines)
