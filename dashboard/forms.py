"""The Faults and Controls pages' inputs, derived from the fault catalogue (Streamlit).

One widget per parameter of a catalogue entry: its name and unit as the label, its help, its
bounds, and its default from the catalogue (or, for a control without one, the value last asked
for, else empty). Issuing goes through `controlplane.commands.issue`; a command the catalogue
refuses is shown as its one sentence and nothing is written.
"""
from __future__ import annotations

import math

import streamlit as st

from controlplane import commands
from controlplane.faults import CATALOGUE, Param, Refused, target
from dashboard import fmt, ui
from dashboard.data.faults import params_of
from dashboard.views import text


def _step(p: Param):
    """A step of about a thousandth of the parameter's range, as a power of ten."""
    if p.minimum is None or p.maximum is None or p.maximum <= p.minimum:
        return 1 if p.kind is int else 1.0
    step = 10 ** math.floor(math.log10((p.maximum - p.minimum) / 1000))
    return max(1, min(10, int(step))) if p.kind is int else float(step)


def label(p: Param) -> str:
    unit = "" if not p.unit or p.unit == "share" else f" ({p.unit})"
    return p.name.replace("_", " ") + unit + (" (0–1)" if p.unit == "share" else "")


def param_input(container, kind: str, p: Param, value=None, collapsed: bool = False):
    """The widget for one parameter; returns what it holds (None: leave it to the catalogue)."""
    key = f"{p.name}_{kind}"
    visibility = "collapsed" if collapsed else "visible"
    if p.kind is str:
        options = list(p.choices) if p.required else [None, *p.choices]
        return container.selectbox(label(p), options, key=key, help=p.help, label_visibility=visibility,
                                   format_func=lambda v: "default" if v is None else v)
    cast = int if p.kind is int else float
    start = value if value is not None else p.default
    return container.number_input(
        label(p), key=key, help=p.help + (f" (default {fmt.decimal(p.default, 3)} {p.unit})".rstrip()
                                          if p.default is not None else ""),
        min_value=None if p.minimum is None else cast(p.minimum),
        max_value=None if p.maximum is None else cast(p.maximum),
        value=None if start is None else cast(start), step=_step(p),
        format="%d" if p.kind is int else ("%.3f" if p.unit == "share" else "%g"),
        placeholder=p.help, label_visibility=visibility)


def job_input(container, kind: str):
    """The job a fault targets: a choice among the catalogue's jobs (the first is the default)."""
    jobs = CATALOGUE[kind].jobs
    if len(jobs) > 1:
        return container.selectbox("job", list(jobs), key=f"job_{kind}", label_visibility="collapsed")
    container.markdown(f"`{jobs[0] if jobs else CATALOGUE[kind].target}`")
    return jobs[0] if jobs else None


def issue(kind: str, job: str | None, params: dict, token: str | None) -> None:
    """Issue one command when the token rule allows it; say what was issued, or why not."""
    if not ui.authorized(token):
        return

    def write(db, s):
        try:
            cid = commands.issue(db, kind, job, **{k: v for k, v in params.items() if v is not None})
        except Refused as exc:
            st.error(str(exc), icon=":material/block:")
            return
        row = commands.get(db, cid)
        said = text.params(kind, params_of(row["params"]))
        st.success(f"Command {cid} issued: {kind} on {target(kind, row['job'])}"
                   + (f" ({said})" if said else "") + ". Its outcome appears in the command log below.",
                   icon=":material/bolt:" if CATALOGUE[kind].is_fault else ":material/tune:")
    ui.draw_with_store(write)
