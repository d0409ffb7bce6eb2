"""Every benchmark, several times, into one table: `python -m bench all --markdown [--quick]`.

Why: one run of a benchmark on a shared 2-core machine is an anecdote; the median of a few runs
with its spread, next to the machine's ceilings (limit) and a peer (Quix Streams), is a figure.

Runs each scenario `--repeat` times (default 3) as its own `python -m bench NAME --json` child
(own process group, killed if it outlives `--timeout`), with the broker started once for all of
them and stopped at the end if this command started it. `--only a,b` picks scenarios; `--quick`
uses smaller inputs and shorter feeds (QUICK below) so the whole set ends in about half an hour;
`--smoke` runs each scenario once at its smallest size (SMOKE below): a check that every bench
runs, not a measurement (its figures are not written; `--markdown` is refused).
With `--markdown` it writes bench/RESULTS.md (`--out` elsewhere): the machine, and per numeric
figure its median, min–max, spread and ratio to the matching limit and peer figure. Progress goes
to stderr; the last stdout line is a JSON summary.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from bench.__main__ import scenarios
from bench.common import logger, own_broker
from infra.config import ROOT, load

log = logger("all")
ALONE = ("all", "soak")  # soak runs an hour on its own: `python -m bench soak`
ORDER = ["limit", "peer", "produce", "throughput", "latency", "guarantees", "recovery", "fraud-guarantees"]
QUICK = {
    "limit": ["--events", "300000"],
    "peer": ["--events", "300000", "--seconds", "15", "--warmup", "10"],
    "produce": ["--count", "100000"],
    "throughput": ["--events", "300000"],
    "latency": ["--seconds", "15", "--warmup", "15"],
    "guarantees": [],
    "recovery": ["--rounds", "1"],
    "fraud-guarantees": ["--before", "10", "--after", "30"],
    "state": ["--cards", "20000", "--rounds", "3"],
    "parse": ["--rows", "50000", "--rounds", "3"],
}
# each scenario at its smallest size (`--smoke`): it runs every step and prints every figure, in
# seconds for the in-process ones, minutes for those that start job processes. The suite runs
# produce, all, limit, throughput and parse so: tests/kafka/test_bench_smoke.py, tests/spark/test_bench_parse.py
SMOKE = {
    "limit": ["--events", "2000", "--producers", "1", "--partitions", "2", "--timeout", "120"],
    "peer": ["--events", "2000", "--producers", "1", "--partitions", "2", "--rate", "100", "--seconds", "2",
             "--warmup", "1", "--timeout", "120"],
    "produce": ["--count", "2000"],
    "throughput": ["--events", "2000", "--producers", "1", "--partitions", "2", "--warmup", "1", "--rounds", "1",
                   "--timeout", "120"],
    "latency": ["--rate", "50", "--seconds", "2", "--warmup", "0", "--drain-seconds", "120"],
    "guarantees": ["--only", "crash-after-sink"],
    "recovery": ["--rounds", "1", "--crash", "usage"],
    "fraud-guarantees": ["--rate", "20", "--before", "2", "--after", "2", "--drain", "120",
                         "--guarantee", "at-most-once"],
    "state": ["--cards", "50", "--touch", "10", "--rounds", "1", "--timeout", "300"],
    "parse": ["--rows", "1200", "--rounds", "1", "--bad-every", "6"],
    "quality": ["--cards", "150", "--days", "2"],  # cards enough for frauds in every training segment
    "backlog": ["--minutes", "0.05", "--rate", "50", "--every", "1", "--timeout", "300"],
    "jvm-start": ["--rounds", "1"],
    "first-minute": ["--rounds", "1", "--timeout", "300"],
    "store-sync": ["--batches", "5", "--rows", "50"],
    "dashboard": ["--rounds", "1"],
    "charts": ["--chart-seconds", "10", "--pages", "checkpoints", "--seconds", "1", "--settle", "0"],
    "handbook": ["--train-start", "2018-04-04", "--train-days", "1", "--delay-days", "1", "--test-days", "1",
                 "--rules-only", "--max-offsets-per-trigger", "20000"],
}
# figure -> the limit / peer figure it is compared with (ratios of medians); throughput's
# wall-clock figures against the no-op ceiling it measures in the same run, its busy ones likewise
LIMIT_OF = {
    **{f"throughput.{g}": "throughput.noop" for g in ("at-most-once", "at-least-once", "exactly-once")},
    **{f"throughput.busy.{g}": "throughput.busy.noop" for g in ("at-most-once", "at-least-once", "exactly-once")},
    "peer.ours_eps": "limit.spark_noop_eps",
    "peer.quix_eps": "limit.kafka_python_consume_eps",
    "produce.achieved_rate": "limit.produce_eps",
}
PEER_OF = {
    "throughput.exactly-once": "peer.quix_eps",
    "peer.ours_eps": "peer.quix_eps",
    "peer.ours_p99_ms": "peer.quix_p99_ms",
    "peer.ours_p50_ms": "peer.quix_p50_ms",
}
# figures that describe the run rather than measure it
NOT_FIGURES = re.compile(r"(^|\.)(events|count|cpus|partitions|producers|seed|goal_s|commit_seconds|"
                         r"latency_rate|rate|target_rate|load_average_1m|sent|labels_sent|measured|expected|"
                         r"labelled|timed|latency_records\..*|in_topics\..*|.*_runs\.\d+|settings\..*|.*_one_batch_rows\.\d+)$|^parse\.(rows|valid|invalid|rounds|cores)$"
                         r"|^quality\.(rules|model)\.(model_version|version|params\..*|trained_on\..*|decided_by\..*)$")


# --- plain functions (tested without Kafka or Spark) ------------------------------------------

def flatten(result: dict, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested result as {"a.b": value}; booleans, strings and None left out."""
    out: dict[str, float] = {}
    items = result.items() if isinstance(result, dict) else enumerate(result)
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, (dict, list)):
            out.update(flatten(value, name + "."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def summarize(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """{scenario: [result, ...]} -> {"scenario.figure": {median, min, max, n, spread}}."""
    values: dict[str, list[float]] = {}
    for scenario, results in runs.items():
        for result in results:
            for name, v in flatten(result).items():
                full = f"{scenario}.{name}"
                if not NOT_FIGURES.search(full):
                    values.setdefault(full, []).append(v)
    out = {}
    for name, vs in values.items():
        med = statistics.median(vs)
        out[name] = {"median": med, "min": min(vs), "max": max(vs), "n": len(vs),
                     "spread": (max(vs) - min(vs)) / abs(med) if med else None}
    return out


def ratio(summary: dict, figure: str, refs: dict) -> float | None:
    ref = refs.get(figure)
    if not ref or figure not in summary or ref not in summary or not summary[ref]["median"]:
        return None
    return summary[figure]["median"] / summary[ref]["median"]


def fmt(x: float | None) -> str:
    """Readable number: thousands separators for big ones, 3 significant digits for small ones."""
    if x is None:
        return "—"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if x == int(x):
        return f"{int(x)}"
    return f"{x:.3g}"


def render_markdown(summary: dict, machine: dict, meta: dict) -> str:
    lines = ["# CardStream benchmark results", "",
             f"Written by `{meta['command']}` on {meta['date']} in {meta['minutes']:.0f} minutes: every scenario "
             f"run {meta['repeat']} times{' with the --quick preset (smaller inputs, shorter feeds)' if meta['quick'] else ''}. "
             "Each scenario's own docstring (bench/<scenario>.py) defines its figures.", "",
             "## Machine", "", "| | |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in machine.items()]
    lines += ["", "## Noise", "",
              "Spread = (max − min) / median over the runs. The machine is shared (load averages above), so "
              "CPU-bound figures move: a fresh run's median is expected inside the min–max shown, or off "
              "by about the spread at most. Ratios are of medians.", ""]
    if meta.get("failed"):
        lines += ["## Runs that failed", ""] + [f"- {f}" for f in meta["failed"]] + [""]
    by_scenario: dict[str, list[str]] = {}
    for name in summary:
        by_scenario.setdefault(name.split(".", 1)[0], []).append(name)
    for scenario in sorted(by_scenario, key=lambda s: ORDER.index(s) if s in ORDER else len(ORDER)):
        lines += [f"## {scenario}", "", "| figure | median | min–max | spread | × limit | × peer | runs |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for name in by_scenario[scenario]:
            f = summary[name]
            spread = "—" if f["spread"] is None else f"{f['spread'] * 100:.0f}%"
            lim, peer = ratio(summary, name, LIMIT_OF), ratio(summary, name, PEER_OF)
            lim_s = "—" if lim is None else f"{lim:.2f} of {LIMIT_OF[name].split('.', 1)[1]}"
            peer_s = "—" if peer is None else f"{peer:.2f} × {PEER_OF[name].split('.', 1)[1]}"
            lines.append(f"| {name.split('.', 1)[1]} | {fmt(f['median'])} | {fmt(f['min'])}–{fmt(f['max'])} | "
                         f"{spread} | {lim_s} | {peer_s} | {f['n']} |")
        lines.append("")
    return "\n".join(lines)


# --- the run ----------------------------------------------------------------------------------

def machine_info() -> dict:
    def first(cmd: list[str], pattern: str) -> str:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            m = re.search(pattern, out.stdout + out.stderr)
            return m.group(1) if m else "?"
        except (OSError, subprocess.TimeoutExpired):
            return "?"

    mem = first(["cat", "/proc/meminfo"], r"MemTotal:\s+(\d+)")
    cpu = first(["cat", "/proc/cpuinfo"], r"model name\s*:\s*(.+)")
    jars = sorted(p.name for p in (ROOT / "infra" / "jars" / "kafka").glob("kafka_*.jar"))
    kafka = re.search(r"kafka_[\d.]+-([\d.]+)\.jar", jars[0]).group(1) if jars else "?"

    versions = {}
    for dist in ("pyspark", "kafka-python", "quixstreams"):
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            versions[dist] = "?"
    return {"cores": os.cpu_count(), "CPU": cpu,
            "RAM": f"{int(mem) / 1024 / 1024:.1f} GiB" if mem.isdigit() else "?",
            "OS": platform.platform(), "Python": platform.python_version(),
            "Java": first(["java", "-version"], r'version "([^"]+)"'), "Spark (PySpark)": versions["pyspark"],
            "Kafka broker": kafka, "kafka-python": versions["kafka-python"], "quixstreams": versions["quixstreams"]}


def run_once(name: str, args: list[str], timeout: float) -> dict:
    """One `python -m bench NAME --json` child; its JSON result (raises on failure or timeout)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "bench", name, "--json", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=None, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{name} did not finish within {timeout:.0f} s and was killed")
    finally:
        try:  # anything the scenario left in its process group (Spark JVMs, jobs) goes too
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"{name} exited with code {proc.returncode}")
    lines = out.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise RuntimeError(f"{name} printed no JSON line") from None


def main(argv: list[str]) -> dict:
    known = [n for n in scenarios() if n not in ALONE]
    p = argparse.ArgumentParser(prog="python -m bench all")
    p.add_argument("--markdown", action="store_true", help="write the results table (see --out)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "RESULTS.md")
    p.add_argument("--repeat", type=int, default=3, help="runs per scenario (default 3)")
    p.add_argument("--only", help=f"comma-separated scenarios among: {', '.join(known)}")
    p.add_argument("--quick", action="store_true", help="smaller inputs, shorter feeds")
    p.add_argument("--smoke", action="store_true",
                   help="each scenario once at its smallest size: does every bench run? (no figures written)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per scenario run")
    p.add_argument("--json", action="store_true", help="(the summary is always printed as JSON)")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be 1 or more")
    if args.smoke and (args.quick or args.markdown):
        p.error("--smoke checks that the benches run; it takes neither --quick nor --markdown")
    if args.smoke:
        args.repeat = 1
    chosen = [n for n in ORDER if n in known] + [n for n in known if n not in ORDER]
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in known]
        if unknown or not wanted:
            p.error(f"unknown scenario(s) in --only: {', '.join(unknown) or '(none given)'}; "
                    f"known: {', '.join(known)}")
        chosen = [n for n in chosen if n in wanted]

    s = load()
    t0 = time.monotonic()
    load_start = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {}
    failed: list[str] = []
    with own_broker(s, log):
        for name in chosen:
            extra = QUICK.get(name, []) if args.quick else SMOKE.get(name, []) if args.smoke else []
            if args.smoke and name not in SMOKE:
                failed.append(f"{name}: no smoke size in bench/all.py SMOKE")
                log(failed[-1])
                continue
            for i in range(1, args.repeat + 1):
                log(f"{name} run {i}/{args.repeat} {' '.join(extra)}".rstrip())
                t = time.monotonic()
                try:
                    runs.setdefault(name, []).append(run_once(name, extra, args.timeout))
                    log(f"{name} run {i}/{args.repeat} done in {time.monotonic() - t:.0f} s")
                except RuntimeError as exc:
                    failed.append(f"{name} run {i}: {exc}")
                    log(failed[-1])
    summary = summarize(runs)
    minutes = (time.monotonic() - t0) / 60
    if args.markdown:
        machine = machine_info()
        machine["load average (1 min) at start / end"] = f"{load_start:.2f} / {os.getloadavg()[0]:.2f}"
        command = "python -m bench all --markdown" + (" --quick" if args.quick else "") + \
            (f" --repeat {args.repeat}" if args.repeat != 3 else "") + (f" --only {args.only}" if args.only else "")
        meta = {"command": command, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "minutes": minutes, "repeat": args.repeat, "quick": args.quick, "failed": failed}
        args.out.write_text(render_markdown(summary, machine, meta) + "\n")
        log(f"wrote {args.out}")
    return {"figures": {k: {"median": v["median"], "min": v["min"], "max": v["max"]} for k, v in summary.items()},
            "failed": failed, "minutes": round(minutes, 1)}
