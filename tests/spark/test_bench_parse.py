"""`python -m bench parse` on the real Spark session: the frame it times holds what it says (the
valid rows and one malformed record of the corpus every `--bad-every`), and every one of them went
through the contract's parsing (each malformed one got a reason)."""
from __future__ import annotations

from bench import parse
from bench.all import SMOKE
from infra.contracts import dead_letter_reason

FIGURES = {"rows", "valid", "invalid", "rounds", "median_ms", "min_ms", "rows_per_s", "core_us_per_row", "cores"}


def test_the_parse_bench_times_the_rows_it_reports(spark):
    out = parse.main(SMOKE["parse"])  # its smallest size: every bench runs in the suite (bench/all.py)
    assert set(out) == FIGURES, set(out) ^ FIGURES
    assert (out["valid"], out["invalid"]) == (1000, 200)
    assert out["rows"] == 1200 and out["median_ms"] > 0 and out["core_us_per_row"] > 0


def test_its_payloads_are_the_contract_and_the_corpus():
    rows = parse.payloads(40, 4, 1_750_000_000_000)
    reasons = [dead_letter_reason(p, 1_750_000_000_000) for p in rows]
    assert [r is None for r in reasons] == [i % 4 != 3 for i in range(40)]
