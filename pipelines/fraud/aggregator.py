"""The score aggregator: the three analyzer scores of one transaction -> `score` and `is_fraud`.

The strongest signal decides, and a second signal corroborates it: score = 1 - (1 - top) x
(1 - CORROBORATION x second). One analyzer sure of itself is enough to flag; two lukewarm ones
raise the score without flagging on their own. The same formula exists twice: as plain Python
(`aggregate`, for tests and for anyone scoring outside Spark) and as Spark SQL expressions
(`aggregate_columns`, what the job runs, in the JVM); a test checks that they agree.
"""
from __future__ import annotations

from typing import Mapping

from infra.contracts import ANALYZERS

CORROBORATION = 0.5


def check_threshold(threshold: float) -> float:
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"The fraud threshold must be in (0, 1], not {threshold!r}.")
    return threshold


def aggregate(scores: Mapping[str, float], threshold: float) -> tuple[float, bool]:
    """({analyzer: score in [0, 1]}, threshold) -> (combined score, is_fraud)."""
    check_threshold(threshold)
    ranked = sorted((min(1.0, max(0.0, float(v))) for v in scores.values()), reverse=True) + [0.0, 0.0]
    top, second = ranked[0], ranked[1]
    score = 1.0 - (1.0 - top) * (1.0 - CORROBORATION * second)
    return score, score >= threshold


def aggregate_columns(threshold: float, analyzers=ANALYZERS):
    """The same combination as Spark columns over `score_<analyzer>`: (score, is_fraud)."""
    from pyspark.sql import functions as F

    check_threshold(threshold)
    cols = [F.coalesce(F.col(f"score_{name}"), F.lit(0.0)) for name in analyzers]
    top = F.greatest(*cols)
    # second highest = the largest of the pairwise minimums (fine for any small number of columns)
    second = F.greatest(*[F.least(a, b) for i, a in enumerate(cols) for b in cols[i + 1:]]) \
        if len(cols) > 1 else F.lit(0.0)
    score = F.lit(1.0) - (F.lit(1.0) - top) * (F.lit(1.0) - F.lit(CORROBORATION) * second)
    return score, score >= F.lit(threshold)
