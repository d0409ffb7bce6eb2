"""Benchmarks: `python -m bench SCENARIO [options] --json`.

Each scenario is a module `bench/<scenario>.py` with `main(argv) -> dict`. It starts what it needs,
cleans up after itself and prints progress to stderr; the runner prints the dict it returns as the
last line of stdout, one JSON object.
"""
