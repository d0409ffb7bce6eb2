"""Guarantees: each usage query against the truth, and what explains each change, all measured.

Figures come from the consistent-cut audit (table `audit`, written by `pipelines.audit.record`):
per guarantee, truth and observed up to the offsets the query has committed, `lost` and
`duplicated` exact at that cut (never including lag), duplicates split into `replayed` and
`upstream`, and the lag on its own (records and seconds).

A change of lost, replayed or upstream between two audit samples is attributed from measured
events only (`changes`):
- the sink ledger (`sink_batches`): the batches that entered the cut between the two samples,
  known by their checkpoint id and batch id (the audit row says which checkpoint and committed
  batch it cut at). A `dropped` record is a batch at-most-once never counted (with its reason);
  two `applied` records of one batch are a replay applied twice; a `skipped` record is a replay
  exactly-once did not apply again; a new checkpoint id is a query that restarted from scratch;
- the command log (`commands`): the faults whose time overlaps the evidence (between the two
  applications of a replayed batch, around a dropped batch, between the last batch of the old
  checkpoint and the first of the new one);
- the supervisor's restarts (`recoveries`, `job_status`) in the same interval.
Nothing else is inferred: a change no evidence explains has no cause in the result.
"""
from __future__ import annotations

import pandas as pd

from controlplane import ledger
from controlplane.faults import FAULTS
from dashboard.data.faults import params_of
from dashboard.data.store import LEDGER_ROWS, frame, now_ms, since, to_time
from infra.contracts import GUARANTEES
from pipelines.guarantees import POLICIES

JOB = "usage"
AUDIT_COLUMNS = ("ts, job, guarantee, metric, truth, observed, lost, duplicated, replayed, upstream, lag_records, "
                 "lag_seconds, committed_offsets, sink_total, checkpoint_id, committed_batch")
SINKS = {g: POLICIES[g].query for g in GUARANTEES}


def latest(db, job: str = JOB) -> pd.DataFrame:
    """The newest audit row per (guarantee, metric) of `job`."""
    return frame(db, f"SELECT {AUDIT_COLUMNS} FROM audit a WHERE job = ? AND ts = "
                     f"(SELECT MAX(ts) FROM audit b WHERE b.job = a.job AND b.guarantee = a.guarantee "
                     f"AND b.metric = a.metric) ORDER BY guarantee, metric", [job])


def audit_series(db, now: int | None = None, minutes: float = 30, metric: str = "processed",
                 baseline: bool = False) -> pd.DataFrame:
    """The usage audit rows of the last `minutes` (oldest first), with `time`; with `baseline`,
    also each guarantee's newest row before the window (what the first change is measured from)."""
    start = since(now, minutes)
    df = frame(db, f"SELECT {AUDIT_COLUMNS} FROM audit WHERE job = ? AND metric = ? AND ts > ? "
                   f"ORDER BY ts LIMIT 20000", [JOB, metric, start])
    if baseline:
        before = frame(db, f"SELECT {AUDIT_COLUMNS} FROM audit a WHERE job = ? AND metric = ? AND ts = "
                           f"(SELECT MAX(ts) FROM audit b WHERE b.job = a.job AND b.metric = a.metric "
                           f"AND b.guarantee = a.guarantee AND b.ts <= ?)", [JOB, metric, start])
        df = pd.concat([before, df], ignore_index=True) if not before.empty else df
    df["time"] = to_time(df["ts"])
    return df


def fault_marks(db, now: int | None = None, minutes: float = 30, job: str | None = None) -> pd.DataFrame:
    """The faults issued in the last `minutes` (commands whose kind is a fault, not a control);
    with `job`, only those aimed at it or at the broker."""
    marks = ",".join("?" for _ in FAULTS)
    aimed = " AND (job = ? OR job IS NULL)" if job else ""
    df = frame(db, f"SELECT id, kind, job, params, status, issued_at, started_at, done_at, result FROM commands "
                   f"WHERE kind IN ({marks}) AND issued_at > ?{aimed} ORDER BY id LIMIT 500",
               [*FAULTS, since(now, minutes), *([job] if job else [])])
    df["time"] = to_time(df["started_at"].fillna(df["issued_at"]))
    return df


# --- the measured events --------------------------------------------------------------------------

def ledger_rows(db, start_ms: int) -> pd.DataFrame:
    """The usage guarantees' sink ledger records since `start_ms`, oldest first."""
    marks = ",".join("?" for _ in SINKS)
    return frame(db, f"SELECT id, sink, checkpoint_id, batch_id, outcome, processed, reason, epoch, ts "
                     f"FROM sink_batches WHERE sink IN ({marks}) AND ts > ? "
                     f"AND id > (SELECT COALESCE(MAX(id), 0) FROM sink_batches) - ? ORDER BY id LIMIT 50000",
                 [*SINKS.values(), start_ms, LEDGER_ROWS])


def fault_commands(db, start_ms: int, job: str = JOB) -> list[dict]:
    """Faults that started since `start_ms` aimed at `job` or at the broker, each with the interval
    it acted in: from its start to its end (or to start + its `seconds`, when that is later)."""
    marks = ",".join("?" for _ in FAULTS)
    df = frame(db, f"SELECT id, kind, job, params, status, issued_at, started_at, done_at, result FROM commands "
                   f"WHERE kind IN ({marks}) AND started_at IS NOT NULL AND started_at > ? "
                   f"AND (job = ? OR job IS NULL) ORDER BY id LIMIT 500", [*FAULTS, start_ms, job])
    out = []
    for r in df.to_dict("records"):
        params = params_of(r["params"])
        until = r["done_at"] if pd.notna(r["done_at"]) else now_ms()
        if params.get("seconds"):
            until = max(until, r["started_at"] + float(params["seconds"]) * 1000)
        out.append({"kind": "command", "id": int(r["id"]), "fault": r["kind"], "job": r["job"], "params": params,
                    "status": r["status"], "at": int(r["started_at"]), "until": int(until),
                    "result": r["result"]})
    return out


def restarts(db, start_ms: int, job: str = JOB) -> list[dict]:
    """The supervisor's measured restarts of `job` since `start_ms`: each recovery (killed, first
    batch with rows after it) and the start of the running process."""
    out = [{"kind": "recovery", "job": r["job"], "fault": r["fault"], "at": int(r["killed_at"]),
            "until": int(r["recovered_at"]), "seconds": float(r["seconds"]), "via": r["via"]}
           for r in frame(db, "SELECT job, fault, killed_at, recovered_at, seconds, "
                              "coalesce(via, 'restart') AS via FROM recoveries "
                              "WHERE job = ? AND killed_at > ? ORDER BY id LIMIT 500", [job, start_ms]
                          ).to_dict("records")]
    row = db.conn.execute("SELECT started_at, restarts, detail FROM job_status WHERE job = ?", [job]).fetchone()
    if row and row[0] and row[0] > start_ms:
        out.append({"kind": "start", "job": job, "at": int(row[0]), "until": int(row[0]),
                    "restarts": row[1], "detail": row[2]})
    return out


# --- attribution (pure) ---------------------------------------------------------------------------

def _in_cut(row: dict, sample: dict) -> bool:
    """Whether the audit `sample` counted this ledger record (the rule of pipelines.audit.applications:
    every batch of an older checkpoint, and the current checkpoint's up to its committed batch)."""
    if row["ts"] > sample["ts"]:
        return False
    if row["checkpoint_id"] != sample.get("checkpoint_id"):
        return True
    committed = sample.get("committed_batch")
    return committed is not None and not pd.isna(committed) and row["batch_id"] <= committed


def _overlapping(events: list[dict], start: int, end: int, guarantee: str) -> list[dict]:
    out = []
    for e in events:
        if e["at"] > end or e["until"] < start:
            continue
        target = (e.get("params") or {}).get("guarantee")
        if e.get("fault") == "task-failure" and target and target != guarantee:
            continue  # it failed another query's batch
        out.append(e)
    return out


def _int(value) -> int:
    return 0 if value is None or pd.isna(value) else int(value)


def _evidence(prev: dict, cur: dict, rows: list[dict], last_checkpoint: str | None) -> list[dict]:
    entering = [r for r in rows if _in_cut(r, cur) and not _in_cut(r, prev)]
    counted = [r for r in rows if _in_cut(r, cur)]
    out = []
    for r in entering:
        if r["outcome"] == ledger.DROPPED:
            out.append({"kind": "dropped", "checkpoint_id": r["checkpoint_id"], "batch_id": r["batch_id"],
                        "processed": _int(r["processed"]), "reason": r["reason"], "at": r["ts"], "until": r["ts"]})
        elif r["outcome"] == ledger.SKIPPED:
            first = min((x["ts"] for x in rows if x["outcome"] == ledger.APPLIED
                         and (x["checkpoint_id"], x["batch_id"]) == (r["checkpoint_id"], r["batch_id"])),
                        default=r["ts"])
            out.append({"kind": "skipped", "checkpoint_id": r["checkpoint_id"], "batch_id": r["batch_id"],
                        "processed": _int(r["processed"]), "applied_at": first, "at": first, "until": r["ts"]})
    keys = {(r["checkpoint_id"], r["batch_id"]) for r in entering if r["outcome"] == ledger.APPLIED}
    for key in sorted(keys, key=lambda k: (str(k[0]), k[1])):
        applied = [r for r in counted if (r["checkpoint_id"], r["batch_id"]) == key and r["outcome"] == ledger.APPLIED]
        if len(applied) > 1:
            times = sorted(r["ts"] for r in applied)
            out.append({"kind": "applied-twice", "checkpoint_id": key[0], "batch_id": key[1],
                        "times": times, "count": len(applied), "processed": _int(applied[-1]["processed"]),
                        "at": times[0], "until": times[-1]})
    new = cur.get("checkpoint_id")
    if new and last_checkpoint and new != last_checkpoint:
        old_ts = [r["ts"] for r in rows if r["checkpoint_id"] == last_checkpoint and r["ts"] <= cur["ts"]]
        new_ts = [r["ts"] for r in rows if r["checkpoint_id"] == new and r["ts"] <= cur["ts"]]
        out.append({"kind": "new-checkpoint", "old": last_checkpoint, "new": new,
                    "at": max(old_ts) if old_ts else prev["ts"], "until": min(new_ts) if new_ts else cur["ts"]})
    return sorted(out, key=lambda e: e["at"])


def changes(guarantee: str, audit: list[dict], rows: list[dict], events: list[dict]) -> list[dict]:
    """Each audit sample (oldest first in `audit`) where lost, replayed or upstream moved, or where
    the ledger shows the guarantee's mechanism at work (a drop, a replay applied twice or skipped,
    a new checkpoint), with that evidence and the faults and restarts overlapping it. Newest first.

    `rows`: this guarantee's sink ledger records; `events`: `fault_commands` + `restarts`.
    """
    out = []
    last_checkpoint = None
    unseen_gap = None  # a new checkpoint whose skipped records no cut has counted lost yet
    for prev, cur in zip(audit, audit[1:]):
        last_checkpoint = prev.get("checkpoint_id") or last_checkpoint
        delta = {k: _int(cur[k]) - _int(prev[k]) for k in ("lost", "replayed", "upstream", "duplicated")}
        evidence = _evidence(prev, cur, rows, last_checkpoint)
        if not any(delta.values()) and not evidence:
            continue
        if delta["lost"] > 0 and not evidence and unseen_gap is not None:
            # the new checkpoint's first commit came after the sample that saw it start: the records
            # it skipped enter the cut now, lost for the same reason
            evidence, unseen_gap = [unseen_gap], None
        elif any(e["kind"] == "new-checkpoint" for e in evidence):
            unseen_gap = None if delta["lost"] > 0 else next(e for e in evidence if e["kind"] == "new-checkpoint")
        causes, seen = [], set()
        for e in evidence:
            for c in _overlapping(events, e["at"], e["until"], guarantee):
                key = (c["kind"], c.get("id"), c["at"])
                if key not in seen:
                    seen.add(key)
                    causes.append(c)
        out.append({"guarantee": guarantee, "ts": int(cur["ts"]), "since": int(prev["ts"]), **delta,
                    "totals": {k: _int(cur[k]) for k in ("truth", "observed", "lost", "duplicated", "replayed",
                                                         "upstream")},
                    "evidence": evidence, "causes": sorted(causes, key=lambda c: c["at"])})
    return out[::-1]


def stories(db, now: int | None = None, minutes: float = 60, limit: int = 8) -> dict[str, list[dict]]:
    """{guarantee: its newest `limit` changes in the last `minutes`} (see `changes`)."""
    now = now or now_ms()
    audit = audit_series(db, now, minutes, baseline=True)
    start = int(audit["ts"].min()) if not audit.empty else since(now, minutes)
    look_back = start - 15 * 60_000  # a replayed batch's first application may precede the window
    ledger_df = ledger_rows(db, look_back)
    events = fault_commands(db, look_back) + restarts(db, look_back)
    out = {}
    for g in GUARANTEES:
        samples = audit[audit["guarantee"] == g].sort_values("ts").to_dict("records")
        rows = ledger_df[ledger_df["sink"] == SINKS[g]].to_dict("records")
        out[g] = changes(g, samples, rows, events)[:limit]
    return out
