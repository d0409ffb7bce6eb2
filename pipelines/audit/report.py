"""What one audit becomes: rows in the store (`record`: the `audit` table the dashboard and the
benches read; `record_paths`: the fraud paths' slices and episodes) and lines for a person (`render`)."""
from __future__ import annotations

import json

from controlplane.clock import now_ms

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
