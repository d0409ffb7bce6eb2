"""Figures as a reader takes them in (pure): thousands separators, integers without ".0", seconds
above 1,000 ms, a unit on every figure, "—" for what is not known."""
from __future__ import annotations

import pandas as pd

NONE = "—"


def _missing(value) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def count(value, unit: str = "") -> str:
    """A whole number with thousands separators: 10386 -> "10,386"."""
    if _missing(value):
        return NONE
    return f"{int(round(float(value))):,}" + (f" {unit}" if unit else "")


def signed(value, unit: str = "") -> str:
    """A change: "+380", "−120", "0"."""
    if _missing(value):
        return NONE
    n = int(round(float(value)))
    text = f"{abs(n):,}" + (f" {unit}" if unit else "")
    return ("+" if n > 0 else "−" if n < 0 else "") + text


def decimal(value, digits: int = 1, unit: str = "") -> str:
    """A measured quantity: integral values without ".0" ("200"), others with `digits` decimals
    below 100 ("33.8"), rounded to whole numbers from 100 on ("1,235")."""
    if _missing(value):
        return NONE
    x = float(value)
    r = round(x) if abs(x) >= 100 else round(x, digits)
    text = f"{int(r):,}" if r == int(r) else f"{r:,.{digits}f}"
    return text + (f" {unit}" if unit else "")


def duration_ms(value) -> str:
    """A duration given in ms: "6.4 ms", "850 ms", "7.0 s" (from 1,000 ms), "2.5 min" (from 2 min)."""
    if _missing(value):
        return NONE
    ms = float(value)
    if abs(ms) < 10:
        return f"{ms:.1f} ms"
    if abs(ms) < 1000:
        return f"{ms:,.0f} ms"
    if abs(ms) < 120_000:
        return f"{ms / 1000:.1f} s"
    if abs(ms) < 2 * 3_600_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:,.1f} h"


def duration_s(value) -> str:
    """A duration given in seconds, as `duration_ms` writes it."""
    return NONE if _missing(value) else duration_ms(float(value) * 1000)


def percent(value, digits: int = 1) -> str:
    """A share 0..1 as a percentage: 0.92 -> "92.0 %"."""
    return NONE if _missing(value) else f"{float(value) * 100:.{digits}f} %"


def size_bytes(value) -> str:
    if _missing(value):
        return NONE
    b = float(value)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(b) >= scale:
            return f"{b / scale:.1f} {unit}"
    return f"{int(b):,} B"


def clock(ms) -> str:
    """A time of day (UTC) from ms since the epoch: "10:35:33"."""
    if _missing(ms):
        return NONE
    return pd.to_datetime(int(ms), unit="ms").strftime("%H:%M:%S")


def short_id(value, n: int = 8) -> str:
    return NONE if _missing(value) or not value else str(value)[:n]
