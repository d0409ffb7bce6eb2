"""The fraud job's side of the poison-batch rule (`pipelines.engine.poison`).

When the decisions query has failed `POISON_BATCH_FAILURES` times the same way on one batch, the
runner calls `Quarantine`. It reads the batch's Kafka range again (a plain Spark batch read of
exactly those offsets, parsed and validated as the stream does, at the batch's own timestamp),
and runs the job's per-record logic on the valid records without state — the analyzers
(`score_cards`), the aggregator and the sink's `decide` — in halves down to single records
(`poison.isolate`). The records that fail on their own are the poison:

1. recorded in the store (`quarantines`, status pending, fenced) with their dead letters;
2. sent to the dead-letter topic in one Kafka transaction with a marker (stream `fraud-poison`,
   batch id = the quarantine's id), so a retry after a crash or a failed send never sends them
   twice; a failed send leaves the row pending and is retried at the query's next failure;
3. marked dead-lettered, with the `dead_letters` counts, in one fenced store transaction.

From then on the decisions query's source excludes them (`excluded`, built at each start), so
the replayed batch decides every other record of it exactly once. What the state would have
added (a record that fails only after the card's earlier transactions) is not reproduced here:
such a batch is "not reproduced", nothing is dead-lettered, and the restart policy goes on.
"""
from __future__ import annotations

import json
import logging

from controlplane import fencing
from controlplane.clock import now_ms
from controlplane.store import connect
from infra import kafka_client
from infra.contracts import ANALYZERS
from pipelines.engine import checkpoints
from pipelines.engine.poison import Failure, exclusion_sql, isolate, reason, still_ahead
from pipelines.fraud.sinks import Fenced, count_dead_letters, dead_letter
from pipelines.fraud.state import TXN_COLUMNS

JOB = QUERY = "fraud"
STREAM = "fraud-poison"   # its own transactional id and markers
PENDING, DEAD_LETTERED, NOT_REPRODUCED = "pending", "dead-lettered", "not reproduced"

log = logging.getLogger(JOB)


class Quarantine:
    def __init__(self, spark, o, s, sinks, faults, epoch: int):
        self.spark, self.o, self.s, self.sinks, self.faults, self.epoch = spark, o, s, sinks, faults, epoch
        self.db = connect(o.store_path)
        self.checkpoint = o.checkpoint / "decisions"

    # -- at every start of the decisions query ----------------------------------------------------
    def excluded(self) -> str | None:
        """The filter that keeps the dead-lettered poison records out of the query's source (only
        those it can still read: at or beyond its committed offsets)."""
        cid = checkpoints.query_id(self.checkpoint)
        if cid is None:
            return None
        records = [(r["partition"], r["offset"])
                   for (text,) in self.db.execute("SELECT records FROM quarantines WHERE query = ? AND "
                                                  "checkpoint_id = ? AND status = ?", [QUERY, cid, DEAD_LETTERED])
                   for r in json.loads(text or "[]")]
        committed = checkpoints.position(self.checkpoint).committed_offsets.get(self.o.transactions_topic, {})
        return exclusion_sql(still_ahead(records, committed))

    # -- called by the runner on the Nth identical failure -----------------------------------------
    def __call__(self, failure: Failure, in_a_row: int) -> bool:
        cid = checkpoints.query_id(self.checkpoint) or ""
        pending = self.db.execute("SELECT id, records FROM quarantines WHERE query = ? AND checkpoint_id = ? "
                                  "AND batch_id = ? AND status = ? ORDER BY id DESC LIMIT 1",
                                  [QUERY, cid, failure.batch_id, PENDING]).fetchone()
        if pending is not None:  # found before; its dead-letter send failed or was cut short
            qid, records = pending[0], json.loads(pending[1])
        else:
            found, total = self.isolate(failure)
            records = [{"partition": r["partition"], "offset": r["offset"], "txn_id": r["txn_id"],
                        "reason": reason(exc),
                        "letter": dead_letter({**r, "dlq_reason": reason(exc)}, self.o.transactions_topic, now_ms())}
                       for r, exc in found]
            qid = self._insert(cid, failure, in_a_row, total, records)
            if not records:
                log.warning("batch %s failed %d times (%s) but none of its %d records fails on its own: "
                            "nothing dead-lettered", failure.batch_id, in_a_row, failure.error, total)
                return False
        self._send(qid, records)
        txns = ", ".join(r["txn_id"] for r in records[:5]) + (" …" if len(records) > 5 else "")
        self.faults.poison_done(self.db, [r["txn_id"] for r in records],
                                f"{len(records)} record(s) of batch {failure.batch_id} dead-lettered after "
                                f"{in_a_row} identical failures ({txns})")
        log.warning("batch %s: %d poison record(s) dead-lettered (%s): %s", failure.batch_id, len(records),
                    txns, records[0]["reason"])
        return True

    def isolate(self, failure: Failure) -> tuple[list[tuple[dict, BaseException]], int]:
        """(records of the batch that fail the per-record logic on their own, with their
        exception; how many valid records the batch holds)."""
        from pipelines.engine.sources import parse_transactions

        topic = self.o.transactions_topic
        start, end = failure.start.get(topic, {}), failure.end.get(topic, {})
        parts = {int(p): (start.get(p, -2), e) for p, e in end.items() if e > start.get(p, 0)}
        if not parts:
            return [], 0
        df = (self.spark.read.format("kafka").options(**kafka_client.spark_options(self.s))
              .option("assign", json.dumps({topic: sorted(parts)}))
              .option("kafka.isolation.level", "read_committed")
              .option("includeHeaders", "true")  # a replay's header: its own time rule, as in the batch
              .option("startingOffsets", json.dumps({topic: {str(p): a for p, (a, _) in parts.items()}}))
              .option("endingOffsets", json.dumps({topic: {str(p): b for p, (_, b) in parts.items()}}))
              .load())
        excluded = self.excluded()
        if excluded:
            df = df.where(excluded)
        now = checkpoints.batch_timestamp(self.checkpoint, failure.batch_id) or now_ms()
        parsed = parse_transactions(df, self.s)  # each record's verdict as in the batch: by its append time
        rows = (parsed.where("dlq_reason IS NULL").select("raw", "partition", "offset", *TXN_COLUMNS)
                .toArrow().to_pylist())
        return isolate(rows, lambda part: self.check(part, now, failure.batch_id)), len(rows)

    def check(self, rows: list[dict], now: int, batch_id: int) -> None:
        """The job's per-record logic without state; raises where the batch would."""
        import pandas as pd

        from pipelines.fraud.aggregator import aggregate
        from pipelines.fraud.analyzers import DEFAULT_LIMITS
        from pipelines.fraud.state import score_cards

        frame = pd.DataFrame({c: [r[c] for r in rows] for c in (*TXN_COLUMNS, "offset")})
        out, _ = score_cards({}, frame, 0, now, DEFAULT_LIMITS)
        scored = [dict(zip(out, values)) for values in zip(*out.values())]
        for r in scored:
            r["score"], r["is_fraud"] = aggregate({a: r[f"score_{a}"] for a in ANALYZERS}, self.o.threshold)
        self.sinks.decide(scored, now, batch_id)

    # -- the store and the dead-letter topic ----------------------------------------------------------
    def _insert(self, cid: str, failure: Failure, in_a_row: int, total: int, records: list[dict]) -> int:
        row = {"job": JOB, "query": QUERY, "checkpoint_id": cid, "batch_id": failure.batch_id,
               "start_offsets": json.dumps(failure.start), "end_offsets": json.dumps(failure.end),
               "error": failure.error, "failures": in_a_row, "batch_records": total,
               "records": json.dumps(records), "dead_lettered": 0,
               "status": PENDING if records else NOT_REPRODUCED, "attempts": 0, "created_at": now_ms(),
               "epoch": self.epoch}
        try:
            with fencing.fenced_write(self.db, JOB, self.epoch, f"quarantine of batch {failure.batch_id}") as conn:
                cur = conn.execute(f"INSERT INTO quarantines ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
                                   list(row.values()))
                return cur.lastrowid
        except fencing.FencedError as exc:
            self.sinks.fenced(self.db, exc, "quarantine")

    def _send(self, qid: int, records: list[dict]) -> None:
        what = f"poison dead letters of quarantine {qid}"
        topic = self.sinks.topic(STREAM, self.o.dlq_topic, self.checkpoint)
        try:
            topic.write(qid, [(None, json.dumps(r["letter"]).encode()) for r in records])
        except Fenced as exc:
            self.sinks.fenced(self.db, exc, what)
        except Exception as exc:
            self.db.conn.execute("UPDATE quarantines SET attempts = attempts + 1, last_error = ? WHERE id = ?",
                                 [f"{type(exc).__name__}: {exc}"[:300], qid])
            raise
        ts = now_ms()
        try:
            with fencing.fenced_write(self.db, JOB, self.epoch, what) as conn:
                done = conn.execute("UPDATE quarantines SET status = ?, dead_lettered = ?, attempts = attempts + 1, "
                                    "done_at = ? WHERE id = ? AND status = ?",
                                    [DEAD_LETTERED, len(records), ts, qid, PENDING]).rowcount
                if done:  # once, with the status change
                    count_dead_letters(conn, [r["reason"] for r in records], ts)
        except fencing.FencedError as exc:
            self.sinks.fenced(self.db, exc, what)
