"""Truth from Kafka vs what each job and guarantee observed: `python -m pipelines.audit --json`.

Truth is what Kafka holds, read with kafka-python from the beginning up to the end offsets taken
when the snapshot starts:

- usage, at-least-once / exactly-once: distinct txn_ids in the `decisions` topic (and how many
  of them are fraud). The fraud job writes that topic at least once, so it may hold duplicates.
- usage, at-most-once: it starts from the latest offsets, so its truth is the distinct txn_ids
  with a record at or after the offsets where that query FIRST started on this store
  (`usage_starts`, written by pipelines.usage). Events produced while it was down count as lost.
- fraud: distinct txn_ids in `transactions`, minus those labelled `bad:<kind>` (malformed input
  goes to the dead-letter topic, never to decisions); observed = rows of the store's `decisions`;
  precision and recall of those rows' is_fraud against the `labels` topic.

lost / duplicated for the usage sinks are net figures from counts (max(0, truth - observed) and
max(0, observed - truth)): a sink holding counts cannot show both at once. For the fraud job they
are per txn_id: lost = truth txn_ids with no decision row; duplicated = decision records in the
Kafka topic beyond the first per txn_id (its at-least-once Kafka sink; the store upserts).

`snapshot(settings)` reads incrementally: offsets and per-txn facts stay in this process between
calls, so a live auditor can call it every few seconds; `record(db, snapshot)` appends the
figures to the `audit` table for the dashboard's time series.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
from dataclasses import dataclass, field

from infra.config import Settings, load
from infra.contracts import GUARANTEES
from pipelines.commands import now_ms

AT_MOST_ONCE = "at-most-once"


@dataclass
class TopicLog:
    """What has been read of one topic so far: next offset per partition, and per-key facts."""
    positions: dict[int, int] = field(default_factory=dict)
    records: int = 0
    # txn_id -> (partition, last offset, is_fraud) for decisions; (is_fraud, pattern) for labels
    facts: dict = field(default_factory=dict)


_CACHE: dict[tuple, object] = {}
_LOCK = threading.Lock()


def _read(s: Settings, topic: str, log: TopicLog, on_record) -> TopicLog:
    """Read `topic` from where `log` stopped up to its end offsets now (captured first)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=s.kafka_bootstrap, enable_auto_commit=False,
                             group_id=None, max_poll_records=10_000, fetch_max_bytes=64 * 1024 * 1024,
                             max_partition_fetch_bytes=16 * 1024 * 1024, consumer_timeout_ms=2000)
    try:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            return log
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        ends = consumer.end_offsets(tps)
        todo = [tp for tp in tps if log.positions.get(tp.partition, 0) < ends[tp]]
        if not todo:
            return log
        consumer.assign(todo)
        for tp in todo:
            consumer.seek(tp, log.positions.get(tp.partition, 0))
        remaining = {tp.partition: ends[tp] for tp in todo}
        idle = 0
        while remaining and idle < 20:
            batch = consumer.poll(timeout_ms=500)
            if not batch:
                idle += 1
                continue
            idle = 0
            for tp, records in batch.items():
                end = remaining.get(tp.partition)
                if end is None:
                    continue
                for r in records:
                    if r.offset >= end:
                        break
                    on_record(r)
                    log.records += 1
                    log.positions[tp.partition] = r.offset + 1
                if log.positions.get(tp.partition, 0) >= end:
                    remaining.pop(tp.partition, None)
                    consumer.pause(tp)
        return log
    finally:
        consumer.close()


def _json(value: bytes):
    try:
        doc = json.loads(value)
        return doc if isinstance(doc, dict) else None
    except (ValueError, TypeError):
        return None


def read_decisions(s: Settings, topic: str) -> TopicLog:
    log = _CACHE.setdefault(("decisions", s.kafka_bootstrap, topic), TopicLog())

    def on_record(r):
        doc = _json(r.value)
        if doc and isinstance(doc.get("txn_id"), str):
            seen = log.facts.get(doc["txn_id"])
            fraud = bool(doc.get("is_fraud")) or (seen[2] if seen else False)
            log.facts[doc["txn_id"]] = (r.partition, r.offset, fraud)

    return _read(s, topic, log, on_record)


def read_transactions(s: Settings, topic: str) -> TopicLog:
    log = _CACHE.setdefault(("transactions", s.kafka_bootstrap, topic), TopicLog())

    def on_record(r):
        doc = _json(r.value)
        if doc and isinstance(doc.get("txn_id"), str):
            log.facts[doc["txn_id"]] = True

    return _read(s, topic, log, on_record)


def read_labels(s: Settings, topic: str) -> TopicLog:
    log = _CACHE.setdefault(("labels", s.kafka_bootstrap, topic), TopicLog())

    def on_record(r):
        doc = _json(r.value)
        if doc and isinstance(doc.get("txn_id"), str):
            log.facts[doc["txn_id"]] = (bool(doc.get("is_fraud")), str(doc.get("pattern") or ""))

    return _read(s, topic, log, on_record)


def _store_decisions(db, key) -> dict[str, bool]:
    """txn_id -> is_fraud of the store's decisions, read incrementally by rowid."""
    state = _CACHE.setdefault(("store-decisions", key), {"rowid": 0, "rows": {}})
    for rowid, txn_id, fraud in db.execute("SELECT rowid, txn_id, is_fraud FROM decisions WHERE rowid > ? "
                                           "ORDER BY rowid", [state["rowid"]]).fetchall():
        state["rows"][txn_id] = bool(fraud)
        state["rowid"] = rowid
    return state["rows"]


def amo_truth(decisions: TopicLog, start_offsets: dict[str, int] | None) -> tuple[int, int]:
    """Distinct txn_ids (and fraud ones) with a record at or after the at-most-once start offsets."""
    if start_offsets is None:
        return 0, 0
    starts = {int(p): o for p, o in start_offsets.items()}
    n = f = 0
    for partition, offset, fraud in decisions.facts.values():
        if offset >= starts.get(partition, 0):
            n += 1
            f += fraud
    return n, f


def compare(truth: int, observed: int) -> dict:
    return {"truth": truth, "observed": observed, "lost": max(0, truth - observed),
            "duplicated": max(0, observed - truth)}


def fraud_figures(truth_ids: set, labels: dict, observed: dict[str, bool], decision_records: int,
                  decision_distinct: int) -> dict:
    """Truth vs the fraud job's store rows, and precision/recall of its is_fraud vs the labels.

    Both over decided transactions only: one not decided yet is lag (counted in `lost` until
    decided), not a missed fraud.
    """
    tp = fp = fn = 0
    for txn_id, decided in observed.items():
        label = labels.get(txn_id)
        if label is None:
            continue
        tp += decided and label[0]
        fp += decided and not label[0]
    for txn_id, (is_fraud, pattern) in labels.items():
        if is_fraud and not pattern.startswith("bad:") and observed.get(txn_id) is False:
            fn += 1
    return {"truth": len(truth_ids), "observed": len(observed),
            "lost": len(truth_ids - observed.keys()),
            "duplicated": max(0, decision_records - decision_distinct),
            "precision": round(tp / (tp + fp), 4) if tp + fp else None,
            "recall": round(tp / (tp + fn), 4) if tp + fn else None}


def snapshot(s: Settings | None = None, db=None) -> dict:
    """Truth vs observed for the fraud job and each usage guarantee, as one dict."""
    from pipelines.guarantees import counts
    from pipelines.store import connect

    s = s or load()
    own = db is None
    db = db or connect(s.store_path)
    try:
        with _LOCK:
            decisions = read_decisions(s, s.topics.decisions)
            txns = read_transactions(s, s.topics.transactions)
            labels = read_labels(s, s.topics.labels)
            observed_rows = _store_decisions(db, str(s.store_path))
            bad = {t for t, (_, pattern) in labels.facts.items() if pattern.startswith("bad:")}
            truth_ids = set(txns.facts) - bad
            fraud = fraud_figures(truth_ids, labels.facts, observed_rows, decisions.records,
                                  len(decisions.facts))
            total = len(decisions.facts)
            total_fraud = sum(f for _, _, f in decisions.facts.values())
            row = db.execute("SELECT offsets FROM usage_starts WHERE guarantee = ? AND topic = ?",
                             [AT_MOST_ONCE, s.topics.decisions]).fetchone()
            amo = amo_truth(decisions, json.loads(row[0]) if row else None)
        sinks = counts(db)
        usage = {}
        for g in GUARANTEES:
            t, tf = amo if g == AT_MOST_ONCE else (total, total_fraud)
            got = sinks.get(g, {"processed": 0, "fraud": 0})
            usage[g] = {**compare(t, got["processed"]), "fraud_truth": tf, "fraud_observed": got["fraud"]}
        return {"fraud": fraud, "usage": usage}
    finally:
        if own:
            db.conn.close()


def record(db, snap: dict, ts: int | None = None) -> int:
    """Append one snapshot to the `audit` table (one row per job, guarantee and metric)."""
    ts = ts or now_ms()
    rows = []
    f = snap["fraud"]
    rows.append({"ts": ts, "job": "fraud", "guarantee": "", "metric": "decisions", "truth": f["truth"],
                 "observed": f["observed"], "lost": f["lost"], "duplicated": f["duplicated"]})
    for g, u in snap["usage"].items():
        rows.append({"ts": ts, "job": "usage", "guarantee": g, "metric": "processed", "truth": u["truth"],
                     "observed": u["observed"], "lost": u["lost"], "duplicated": u["duplicated"]})
        fraud = compare(u["fraud_truth"], u["fraud_observed"])
        rows.append({"ts": ts, "job": "usage", "guarantee": g, "metric": "fraud", **fraud})
    for metric in ("precision", "recall"):  # the ratio itself in `observed` (the dashboard reads it so)
        if f.get(metric) is not None:
            rows.append({"ts": ts, "job": "fraud", "guarantee": "", "metric": metric, "truth": None,
                         "observed": f[metric], "lost": None, "duplicated": None})
    db["audit"].upsert_all(rows, pk=("ts", "job", "guarantee", "metric"))
    return len(rows)


def render(snap: dict) -> str:
    f = snap["fraud"]
    lines = [f"fraud: truth {f['truth']}, observed {f['observed']}, lost {f['lost']}, duplicated "
             f"{f['duplicated']}, precision {f['precision']}, recall {f['recall']}"]
    for g, u in snap["usage"].items():
        lines.append(f"usage {g}: truth {u['truth']}, observed {u['observed']}, lost {u['lost']}, "
                     f"duplicated {u['duplicated']}; fraud {u['fraud_observed']} of {u['fraud_truth']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.audit",
                                     description="Truth from Kafka vs each job and guarantee.")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line last")
    parser.add_argument("--record", action="store_true", help="also append them to the store's audit table")
    args = parser.parse_args(argv)
    s = load()
    try:
        snap = snapshot(s)
    except Exception as exc:  # noqa: BLE001 - one sentence for the user, not a traceback
        print(f"audit: could not read Kafka at {s.kafka_bootstrap} or the store {s.store_path}: {exc}",
              file=sys.stderr)
        return 1
    if args.record:
        from pipelines.store import connect

        db = connect(s.store_path)
        record(db, snap)
        db.conn.close()
    if args.json:
        print(json.dumps(snap), flush=True)
    else:
        print(render(snap))
    return 0


if __name__ == "__main__":
    sys.exit(main())
