"""Controls: what the simulator was last asked (rate, fraud and late shares, pause or resume), from
the command table, for each control of the fault catalogue."""
from __future__ import annotations

from controlplane.faults import CATALOGUE, CONTROLS
from dashboard.data.faults import params_of

SIMULATOR = "simulator"


def last_controls(db) -> dict:
    """{control kind: its newest command (id, params, status, issued_at, result)}, and `paused`:
    whether the newest pause or resume was a pause (False when neither was sent)."""
    out = {}
    for kind in CONTROLS:
        row = db.conn.execute("SELECT id, params, status, issued_at, result FROM commands "
                              "WHERE job = ? AND kind = ? ORDER BY id DESC LIMIT 1",
                              [CATALOGUE[kind].default_job or SIMULATOR, kind]).fetchone()
        if row:
            out[kind] = {"id": row[0], "params": params_of(row[1]), "status": row[2], "issued_at": row[3],
                         "result": row[4]}
    switches = [(out[k]["id"], k == "pause") for k in ("pause", "resume") if k in out]
    out["paused"] = max(switches)[1] if switches else False
    return out


def last_value(controls: dict, kind: str, param: str):
    """The value the newest `kind` command asked for `param` (None when never sent)."""
    return (controls.get(kind) or {}).get("params", {}).get(param)
