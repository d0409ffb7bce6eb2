"""`python -m simulator replay` as a real process onto the real broker, on a slice of the handbook's
dataset (a few hundred rows of six cards over 20 days, read with pyarrow filters: frauds of
scenarios 1 and 3 among them), read back with KafkaConsumer: every transaction once, keyed by its
card on the partition Kafka's partitioner picks, in event-time order per partition, carrying the
run's header; every label whose time is not after the last transaction, appended after the
transactions at or before its time, the rest counted as pending; the fraud job's Kafka source
(headers included) finds every replayed record valid; and a bad file sends nothing."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from infra import kafka_client
from infra.config import ROOT
from infra.contracts import dead_letter_reason
from infra.histories import DAY_MS, HANDBOOK, HANDBOOK_PATTERNS, REPLAY_HEADER
from infra.partitioner import partitions_for
from tests.harness.topics import read_all

CARDS = [0, 1, 27, 365, 1692, 3774]       # 27: a compromised card (scenario 3); 3774: amounts over 220
UNTIL = dt.datetime(2018, 4, 21)
RUN = "replay-kafka-test"


@pytest.fixture(scope="module")
def handbook_slice(tmp_path_factory, settings):
    path = settings.handbook_data
    if not path.exists():
        pytest.fail(f"The handbook's dataset is not at {path} (HANDBOOK_DATA; by default "
                    f"../shared/datasets/handbook/transactions.parquet beside the repository).")
    table = pq.read_table(path, filters=[("CUSTOMER_ID", "in", CARDS), ("TX_DATETIME", "<", UNTIL)])
    assert 200 <= table.num_rows <= 500 and set(table["TX_FRAUD_SCENARIO"].to_pylist()) >= {0, 1, 3}
    out = tmp_path_factory.mktemp("handbook") / "slice.parquet"
    pq.write_table(table, out)
    return out, table.to_pylist()


def replay(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "simulator", "replay", *args, "--no-progress"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def replayed(kafka, topic, handbook_slice):
    path, rows = handbook_slice
    tx, lb = topic("replay-tx"), topic("replay-labels")
    proc = replay(str(path), "--max", "--topic", tx, "--labels-topic", lb, "--bootstrap", kafka, "--run-id", RUN)
    assert proc.returncode == 0, proc.stderr
    totals = json.loads(proc.stdout.strip().splitlines()[-1])
    return rows, totals, tx, lb, read_all(tx), read_all(lb), proc.stderr


def test_the_transactions_come_back_keyed_ordered_and_marked_as_a_replay(replayed):
    rows, totals, tx, _, records, _, stderr = replayed
    assert RUN in stderr and totals["run_id"] == RUN
    assert totals["sent"] == len(records) == len(rows) and totals["failed"] == 0 and totals["unacknowledged"] == 0
    parts = max(r.partition for r in records) + 1
    by_id = {HANDBOOK.txn_id_of(r["TRANSACTION_ID"]): r for r in rows}
    for r in records:
        doc = json.loads(r.value)
        row = by_id.pop(doc["txn_id"])
        assert doc["card_id"] == HANDBOOK.card_of(row["CUSTOMER_ID"]) and r.key == doc["card_id"].encode()
        assert r.partition == int(partitions_for([r.key], parts)[0])
        assert (REPLAY_HEADER, RUN.encode()) in r.headers
        assert doc["event_time"] == int(row["TX_DATETIME"].replace(tzinfo=dt.timezone.utc).timestamp() * 1000)
        assert doc["amount_cents"] == round(row["TX_AMOUNT"] * 100) and "lat" not in doc and "lon" not in doc
        assert dead_letter_reason(r.value, now_ms=r.timestamp, replay=True) is None
        assert dead_letter_reason(r.value, now_ms=r.timestamp) == "event_time too far in the past"
    assert not by_id
    for p in range(parts):
        times = [json.loads(r.value)["event_time"] for r in records if r.partition == p]
        assert times == sorted(times), f"partition {p} is not in event-time order"
    assert totals["first_event_time"] == min(json.loads(r.value)["event_time"] for r in records)
    assert totals["last_event_time"] == max(json.loads(r.value)["event_time"] for r in records)


def test_each_label_comes_after_its_time_and_the_later_ones_stay_pending(replayed):
    rows, totals, _, _, records, labels, _ = replayed
    last = totals["last_event_time"]
    times = np.array(sorted(json.loads(r.value)["event_time"] for r in records))
    due = int((times + 7 * DAY_MS <= last).sum())
    assert totals["labels_sent"] == len(labels) == due > 0 and totals["labels_pending"] == len(rows) - due > 0
    appended = sorted((json.loads(r.value)["event_time"], r.timestamp) for r in records)
    by_id = {HANDBOOK.txn_id_of(r["TRANSACTION_ID"]): r for r in rows}
    frauds = 0
    for r in labels:
        doc = json.loads(r.value)
        row = by_id[doc["txn_id"]]
        assert r.key == doc["txn_id"].encode() and (REPLAY_HEADER, RUN.encode()) in r.headers
        assert doc["known_at"] == doc["event_time"] + 7 * DAY_MS <= last
        assert doc["is_fraud"] == (row["TX_FRAUD"] == 1) and doc["is_late"] is False
        assert doc["pattern"] == HANDBOOK_PATTERNS[row["TX_FRAUD_SCENARIO"]]
        assert doc["card_id"] == HANDBOOK.card_of(row["CUSTOMER_ID"])
        assert doc["merchant_id"] == HANDBOOK.merchant_of(row["TERMINAL_ID"])
        frauds += doc["is_fraud"]
        # in the merged order: appended (broker's clock) no earlier than every transaction at or before its time
        before = [ts for t, ts in appended if t <= doc["known_at"]]
        assert r.timestamp >= max(before)
    assert frauds > 0
    for p in {r.partition for r in labels}:
        known = [json.loads(r.value)["known_at"] for r in labels if r.partition == p]
        assert known == sorted(known)


def test_the_fraud_jobs_kafka_source_finds_every_replayed_record_valid(replayed, spark, settings, tmp_path):
    from pipelines.engine.sources import parse_transactions, read_kafka

    rows, _, tx, _, _, _, _ = replayed
    seen: list = []
    query = (parse_transactions(read_kafka(spark, tx, settings), settings)
             .writeStream.foreachBatch(lambda batch, _id: seen.extend(batch.select("txn_id", "dlq_reason").collect()))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    assert len(seen) == len(rows) and all(r.dlq_reason is None for r in seen), \
        {r.dlq_reason for r in seen if r.dlq_reason}


def test_a_bad_file_sends_nothing(kafka, topic, handbook_slice, tmp_path):
    _, rows = handbook_slice
    import pyarrow as pa

    shuffled = pa.Table.from_pylist(rows[:5] + rows[6:] + rows[5:6])  # the 6th row moved to the end
    bad = tmp_path / "unsorted.parquet"
    pq.write_table(shuffled, bad)
    tx, lb = topic("replay-bad-tx"), topic("replay-bad-labels")
    proc = replay(str(bad), "--max", "--topic", tx, "--labels-topic", lb, "--bootstrap", kafka)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().startswith("replay: The times are not in order:") and len(proc.stderr.splitlines()) == 1
    assert sum(kafka_client.end_offsets(tx).values()) == 0 and sum(kafka_client.end_offsets(lb).values()) == 0
