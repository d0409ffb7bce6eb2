"""Faults: the command log (every fault and control, its life and outcome), the recovery times the
supervisor measured, the writes fencing rejected, the dead letters, and what the jobs read and did
not keep."""
from __future__ import annotations

import json

import pandas as pd

from controlplane.faults import CATALOGUE
from dashboard.data.store import frame, scalar, to_time

COMMAND_COLUMNS = ["id", "issued", "kind", "job", "params", "status", "took_s", "recovered_s", "result",
                   "issued_at", "started_at", "done_at"]


def params_of(raw: str | None) -> dict:
    try:
        params = json.loads(raw or "{}")
    except ValueError:
        return {}
    return params if isinstance(params, dict) else {}


def units(kind: str) -> dict[str, str]:
    """{parameter: unit} of one kind, from the catalogue ({} for a kind it does not know)."""
    fault = CATALOGUE.get(kind)
    return {p.name: p.unit for p in fault.params} if fault else {}


def command_log(db, limit: int = 50, job: str | None = None, kinds: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Recent commands, newest first: params (a dict), status, how long they took, the result."""
    where, args = [], []
    if job:
        where.append("job = ?")
        args.append(job)
    if kinds:
        where.append(f"kind IN ({','.join('?' for _ in kinds)})")
        args += list(kinds)
    clause = ("WHERE " + " AND ".join(where)) if where else ""
    df = frame(db, f"SELECT id, kind, job, params, status, issued_at, started_at, done_at, result "
                   f"FROM commands {clause} ORDER BY id DESC LIMIT ?", [*args, limit])
    df["params"] = df["params"].map(params_of)
    df["issued"] = to_time(df["issued_at"])
    df["took_s"] = (df["done_at"] - df["started_at"]) / 1000
    recovered = frame(db, "SELECT command_id, seconds FROM recoveries WHERE command_id IS NOT NULL")
    df["recovered_s"] = df["id"].map(dict(zip(recovered["command_id"], recovered["seconds"]))) if not df.empty else []
    return df[COMMAND_COLUMNS]


def recoveries(db, limit: int = 50) -> pd.DataFrame:
    """Recovery time per fault the supervisor measured (kill → first new batch with rows), how (a
    warm standby's takeover or a cold restart) and where it went (pipelines.supervisor.faults.phases)."""
    df = frame(db, "SELECT id, job, fault, killed_at, recovered_at, seconds, coalesce(via, 'restart') AS via, "
                   "command_id, to_lease_s, to_batch_s, batch_s FROM recoveries ORDER BY id DESC LIMIT ?", [limit])
    df["killed"] = to_time(df["killed_at"])
    return df


def rejected_writes(db, limit: int = 20) -> pd.DataFrame:
    return frame(db, "SELECT id, job, epoch, current_epoch, ts, what FROM rejected_writes "
                     "ORDER BY id DESC LIMIT ?", [limit])


def rejected_total(db) -> int:
    return int(scalar(db, "SELECT COUNT(*) FROM rejected_writes") or 0)


def dead_letters(db) -> pd.DataFrame:
    """Malformed input the fraud job sent to the dead-letter topic, counted by reason."""
    return frame(db, "SELECT reason, count, updated_at FROM dead_letters ORDER BY count DESC LIMIT 50")


NOT_KEPT_SEP = "\n"  # between the JSON details GROUP_CONCAT joins (JSON text holds no raw newline)


def not_kept_why(kind: str, details: str | None) -> str:
    """One sentence for a `not_kept` group: what was not kept and why, from its rows' JSON details
    (the rejection reasons, or the repeated txn_ids) (pure)."""
    named: list[str] = []
    for detail in (details or "").split(NOT_KEPT_SEP):
        try:
            values = json.loads(detail)
        except ValueError:
            continue
        named += [str(v) for v in values if str(v) not in named] if isinstance(values, list) else []
    named.sort()
    if kind == "rejected":
        return "decisions breaking the contract, not counted" + (f" ({', '.join(named)})" if named else "")
    if kind == "repeated":
        shown = ", ".join(named[:5]) + (" …" if len(named) > 5 else "")
        return ("txn_ids decided before: the store keeps the first decision, the decisions topic has every one"
                + (f" (e.g. {shown})" if named else ""))
    return kind


def not_kept(db) -> pd.DataFrame:
    """Records a job read and did not keep (`not_kept`), per job, query and kind: how many, over how
    many batches, the last time, and why in words. Nothing is dropped without a trace: the usage
    queries' rejected decisions and the fraud store's repeated txn_ids end here."""
    df = frame(db, "SELECT job, query, kind, SUM(count) AS count, COUNT(*) AS batches, MAX(ts) AS last_ts, "
                   f"GROUP_CONCAT(detail, '{NOT_KEPT_SEP}') AS details FROM not_kept "
                   "GROUP BY job, query, kind ORDER BY count DESC LIMIT 50")
    df["why"] = [not_kept_why(k, d) for k, d in zip(df["kind"], df["details"])]
    df["last"] = to_time(df["last_ts"])
    return df


def quarantines(db, limit: int = 20) -> pd.DataFrame:
    """Poison batches (the poison-batch rule), newest first: the query and batch, its Kafka range,
    how many identical failures made it poison, the records dead-lettered and their reason (or why
    none was), and when."""
    df = frame(db, "SELECT id, query, batch_id, start_offsets, end_offsets, error, failures, batch_records, "
                   "records, dead_lettered, status, attempts, last_error, created_at, done_at "
                   "FROM quarantines ORDER BY id DESC LIMIT ?", [limit])
    df["offsets"] = [offset_range(a, b) for a, b in zip(df["start_offsets"], df["end_offsets"])]
    df["reason"] = [_reason(r, e, s) for r, e, s in zip(df["records"], df["error"], df["status"])]
    df["when"] = to_time(df["created_at"])
    return df


def _reason(records: str | None, error: str | None, status: str) -> str:
    try:
        reasons = sorted({r["reason"] for r in json.loads(records or "[]")})
    except (ValueError, TypeError, KeyError):
        reasons = []
    if reasons:
        return "; ".join(reasons[:3]) + (f" (+{len(reasons) - 3} more)" if len(reasons) > 3 else "")
    if status == "not reproduced":
        return f"no record fails on its own: nothing dead-lettered ({error})"
    return error or ""


def offset_range(start: str | None, end: str | None) -> str:
    """`p0 10–20, p1 4–9`: the batch's Kafka range per partition that held records (end exclusive)."""
    try:
        a, b = json.loads(start or "{}"), json.loads(end or "{}")
    except ValueError:
        return ""
    out = []
    for topic, parts in b.items():
        for p, e in sorted(parts.items(), key=lambda kv: int(kv[0])):
            s = (a.get(topic) or {}).get(p, (a.get(topic) or {}).get(str(p), 0))
            if e > s:
                out.append(f"p{p} {s}–{e}")
    return ", ".join(out)


def dead_letter_send_failures(db) -> int:
    """Dead-letter sends that failed and were retried: failed batches of the dead-letter queries,
    and failed sends of poison records (a quarantine's attempts beyond its successful one)."""
    batches = scalar(db, "SELECT COUNT(*) FROM query_failures WHERE query LIKE '%-dlq'") or 0
    poison = scalar(db, "SELECT SUM(attempts - (status = 'dead-lettered')) FROM quarantines") or 0
    return int(batches) + int(poison)


def query_failures(db, limit: int = 20) -> pd.DataFrame:
    """Recent failures of streaming queries as their job's runner saw them, newest first."""
    df = frame(db, "SELECT id, job, query, batch_id, error, in_a_row, action, ts FROM query_failures "
                   "ORDER BY id DESC LIMIT ?", [limit])
    df["when"] = to_time(df["ts"])
    return df
