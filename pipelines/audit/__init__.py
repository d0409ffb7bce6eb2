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
topic incrementally, in bounded memory: each cut folds what its query has committed into counts
(`pipelines.audit.folds`) and the topics keep only the unfolded records and a horizon of recent
ones. The live auditor persists its folds (`audit_cuts`) and resumes from them after a restart.

The package by role: `auditor` (the `Auditor` and its snapshot), `folds` and `cut` (the cuts'
arithmetic), `topics` (the topics' indexes), `paths` (the fraud job's two paths), `report` (an
audit into the store's tables and into text).
"""
from __future__ import annotations

from pipelines.audit.auditor import Auditor, snapshot
from pipelines.audit.folds import applications, ledger_rows
from pipelines.audit.report import record, record_paths, render

__all__ = ["Auditor", "applications", "ledger_rows", "record", "record_paths", "render", "snapshot"]
