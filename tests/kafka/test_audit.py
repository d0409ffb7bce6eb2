"""The audit against the real broker: truth read from Kafka at each query's committed offsets,
the sinks' ledger, lag apart, and the CLI.

The checkpoints here are written in Spark's own file format (as in a real checkpoint's
`metadata`, `sources/0/0`, `offsets/N`, `commits/N`), so the audit is tested without a Spark job;
tests/e2e run it against real jobs.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from controlplane import ledger
from infra import kafka_client
from infra.config import ROOT, Topics
from pipelines import audit, guarantees
from pipelines.audit.topics import TopicIndex
from pipelines.usage.job import record_start


def decision(i: int, fraud: bool = False) -> dict:
    return {"txn_id": f"t-{i}", "card_id": f"c-{i % 7}", "event_time": 1_700_000_000_000 + i, "is_fraud": fraud}


def produce(topic: str, docs: list[dict]) -> None:
    p = kafka_client.producer(None, acks="all")
    for d in docs:  # one partition: offsets are positions, which keeps the expectations readable
        p.send(topic, key=d["txn_id"].encode(), value=json.dumps(d).encode(), partition=0)
    p.flush()
    p.close()


def checkpoint(path: Path, topic: str, query_id: str, ends: list[int], committed: int | None, initial: int = 0):
    """A checkpoint in Spark's format: batch i ends at ends[i]; batches up to `committed` done."""
    (path / "offsets").mkdir(parents=True, exist_ok=True)
    (path / "commits").mkdir(exist_ok=True)
    (path / "sources" / "0").mkdir(parents=True, exist_ok=True)
    (path / "metadata").write_text(json.dumps({"id": query_id}))
    (path / "sources" / "0" / "0").write_text("\x00v1\n" + json.dumps({topic: {"0": initial}}))
    for i, end in enumerate(ends):
        (path / "offsets" / str(i)).write_text('v1\n{"batchWatermarkMs":0}\n' + json.dumps({topic: {"0": end}}))
        if committed is not None and i <= committed:
            (path / "commits" / str(i)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def batch(sink, cp, i, start, end, topic, processed, fraud=0):
    return ledger.Batch(sink, cp, i, processed, fraud, {topic: {"0": start}}, {topic: {"0": end}})


def _settings(settings, topic, tmp_path):
    names = Topics(transactions=topic("tx"), labels=topic("labels"), decisions=topic("decisions"),
                   dead_letters="unused", partitions=1)
    return dataclasses.replace(settings, topics=names, store_path=tmp_path / "cardstream.db",
                               checkpoint_root=tmp_path / "checkpoints")


def test_consistent_cut_per_guarantee(kafka, settings, topic, store, tmp_path):
    s = _settings(settings, topic, tmp_path)
    t = s.topics.decisions
    docs = [decision(i, i % 4 == 0) for i in range(20)]
    produce(t, docs + docs[:2])                       # offsets 20, 21: two ids sent twice upstream
    epoch = 1

    # exactly-once: two batches, both committed; the replay of batch 1 skipped by its sink
    eo = guarantees.policy("exactly-once")
    checkpoint(s.checkpoint_root / eo.query, t, "eo", [10, 22], committed=1)
    assert eo.write(store, batch(eo.query, "eo", 0, 0, 10, t, 10, 3), epoch) == ledger.APPLIED
    assert eo.write(store, batch(eo.query, "eo", 1, 10, 22, t, 10, 2), epoch) == ledger.APPLIED
    assert eo.write(store, batch(eo.query, "eo", 1, 10, 22, t, 10, 2), epoch) == ledger.SKIPPED

    # at-least-once: batch 1 applied, killed before its commit, replayed and applied again;
    # batch 2 is applied but not committed yet: ahead of the cut, not a duplicate
    alo = guarantees.policy("at-least-once")
    checkpoint(s.checkpoint_root / alo.query, t, "alo", [10, 20, 22], committed=1)
    for b in (batch(alo.query, "alo", 0, 0, 10, t, 10, 3), batch(alo.query, "alo", 1, 10, 20, t, 10, 2),
              batch(alo.query, "alo", 1, 10, 20, t, 10, 2), batch(alo.query, "alo", 2, 20, 22, t, 2, 2)):
        alo.write(store, b, epoch)

    # at-most-once: first started at offset 5, restarted at 15 (a new checkpoint each run); its
    # second run dropped batch 0 [15, 18) when the sink was down
    amo = guarantees.policy("at-most-once")
    record_start(store, amo.name, t, {"0": 5})
    amo.write(store, batch(amo.query, "amo-1", 0, 5, 9, t, 4, 1), epoch)
    amo.drop(store, batch(amo.query, "amo-2", 0, 15, 18, t, 3, 1), epoch, "sink down")
    amo.write(store, batch(amo.query, "amo-2", 1, 18, 22, t, 4, 2), epoch)
    checkpoint(s.checkpoint_root / amo.query, t, "amo-2", [18, 22], committed=1, initial=15)

    produce(t, [decision(i) for i in range(20, 26)])  # arrives after the cut: lag, never lost
    snap = audit.Auditor(s, store).snapshot()["usage"]

    e = snap["exactly-once"]
    assert (e["truth"], e["observed"], e["lost"], e["duplicated"]) == (20, 20, 0, 0)
    assert e["lag_records"] == 6 and e["committed_offsets"] == {"0": 22}
    a = snap["at-least-once"]
    assert (a["truth"], a["observed"], a["lost"], a["replayed"], a["upstream"]) == (20, 30, 0, 10, 0)
    assert a["sink_total"] == 32 and a["committed_batch"] == 1 and a["lag_records"] == 8
    m = snap["at-most-once"]
    # truth: ids at offsets 5..21 = t-5..t-19 (15) + t-0, t-1 again = 17 distinct
    # covered: 5..8 (t-5..t-8) and 18..21 (t-18, t-19, t-0, t-1): 8 ids; lost: 9
    assert (m["truth"], m["observed"], m["lost"], m["duplicated"]) == (17, 8, 9, 0)
    assert m["fraud_truth"] == sum(1 for i in list(range(5, 20)) + [0] if i % 4 == 0)

    assert audit.record(store, audit.Auditor(s, store).snapshot()) == 2 + 6
    row = store.execute("SELECT replayed, lag_records FROM audit WHERE guarantee = 'at-least-once' "
                        "AND metric = 'processed'").fetchone()
    assert row == (10, 8)


def test_cli_prints_one_json_line_last(kafka, settings, topic, tmp_path):
    s = _settings(settings, topic, tmp_path)
    produce(s.topics.decisions, [decision(i, True) for i in range(3)])
    env = dict(os.environ, TOPIC_DECISIONS=s.topics.decisions, TOPIC_TRANSACTIONS=s.topics.transactions,
               TOPIC_LABELS=s.topics.labels, CARDSTREAM_DB=str(s.store_path), PYTHONPATH=str(ROOT),
               CHECKPOINT_ROOT=str(s.checkpoint_root))
    out = subprocess.run([sys.executable, "-m", "pipelines.audit", "--json", "--record"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    snap = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(snap) == {"fraud", "usage", "paths"}
    alo = snap["usage"]["at-least-once"]
    # nothing has run: nothing is owed, all three records are lag
    assert (alo["truth"], alo["lost"], alo["lag_records"]) == (0, 0, 3)


def test_a_restarted_auditor_resumes_from_its_saved_cuts(kafka, settings, topic, store, tmp_path):
    s = _settings(settings, topic, tmp_path)
    t = s.topics.decisions
    produce(t, [decision(i) for i in range(20)])
    eo, alo = guarantees.policy("exactly-once"), guarantees.policy("at-least-once")
    checkpoint(s.checkpoint_root / eo.query, t, "eo", [10, 20], committed=1)
    checkpoint(s.checkpoint_root / alo.query, t, "alo", [10, 20], committed=0)
    for p, cp in ((eo, "eo"), (alo, "alo")):
        p.write(store, batch(p.query, cp, 0, 0, 10, t, 10), 1)
        p.write(store, batch(p.query, cp, 1, 10, 20, t, 10), 1)
    first = audit.Auditor(s, store, persist=True).snapshot()["usage"]
    assert (first["exactly-once"]["truth"], first["at-least-once"]["truth"]) == (20, 10)

    produce(t, [decision(i) for i in range(20, 30)] + [decision(0), decision(1)])   # two ids again, upstream
    checkpoint(s.checkpoint_root / eo.query, t, "eo", [10, 20, 32], committed=2)
    eo.write(store, batch(eo.query, "eo", 2, 20, 32, t, 10), 1)                        # it dedupes them
    checkpoint(s.checkpoint_root / alo.query, t, "alo", [10, 20, 32], committed=2)
    alo.write(store, batch(alo.query, "alo", 1, 10, 20, t, 10), 1)                     # the replay of batch 1
    alo.write(store, batch(alo.query, "alo", 2, 20, 32, t, 12), 1)
    again = audit.Auditor(s, store, persist=True)
    assert again.cuts["exactly-once"].fold == {0: 20} and again.cuts["exactly-once"].folded.truth == 20
    snap = again.snapshot()["usage"]
    e, a = snap["exactly-once"], snap["at-least-once"]
    assert (e["truth"], e["observed"], e["lost"], e["duplicated"]) == (30, 30, 0, 0)
    assert (a["truth"], a["observed"], a["lost"], a["replayed"], a["upstream"]) == (30, 42, 0, 10, 2)


def test_the_audit_holds_only_what_it_has_not_folded(kafka, settings, topic, store, tmp_path):
    s = dataclasses.replace(_settings(settings, topic, tmp_path), audit_horizon_minutes=0.0)
    t = s.topics.decisions
    produce(t, [decision(i) for i in range(30)])
    eo, alo = guarantees.policy("exactly-once"), guarantees.policy("at-least-once")
    checkpoint(s.checkpoint_root / eo.query, t, "eo", [10, 30], committed=1)
    checkpoint(s.checkpoint_root / alo.query, t, "alo", [10, 30], committed=0)
    for p, cp in ((eo, "eo"), (alo, "alo")):
        p.write(store, batch(p.query, cp, 0, 0, 10, t, 10), 1)
        p.write(store, batch(p.query, cp, 1, 10, 30, t, 20), 1)
    auditor = audit.Auditor(s, store)
    snap = auditor.snapshot()["usage"]
    assert (snap["exactly-once"]["truth"], snap["at-least-once"]["truth"]) == (30, 10)
    # with no horizon, what every cut folded is gone: at-least-once has folded up to offset 10
    assert auditor.held()[t] == 20
    checkpoint(s.checkpoint_root / alo.query, t, "alo", [10, 30], committed=1)
    snap = auditor.snapshot()["usage"]
    assert snap["at-least-once"]["truth"] == 30 and snap["at-least-once"]["lost"] == 0
    assert auditor.held()[t] == 0


def test_txn_ids_are_read_again_from_kafka_and_a_short_read_refuses_to_fold(kafka, settings, topic, tmp_path):
    """The fraud cut's txn_ids come from Kafka, range by range, each offset once; when the topic does
    not give the whole range (here: offsets it does not have yet), nothing is taken and the fold waits."""
    s = _settings(settings, topic, tmp_path)
    produce(s.topics.transactions, [decision(i) for i in range(6)])
    index = TopicIndex(s, s.topics.transactions).read()
    assert index.take_ids({0: 4}) == [(o, f"t-{o}") for o in range(4)]
    assert index.take_ids({0: 4}) == []                       # taken once
    try:
        index.take_ids({0: 9})                                # 6, 7, 8 are not in the topic
    except TimeoutError as exc:
        assert "partition 0 offset 6 of 9" in str(exc)
    else:
        raise AssertionError("a short read of txn_ids folded anyway")
    assert index.take_ids({0: 6}) == [(4, "t-4"), (5, "t-5")]  # the failed take took nothing
