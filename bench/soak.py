"""`python -m bench soak --minutes M [--rate R] [--fault-every-s 120] --json`: the demo for a long
time, under faults, with every process's memory sampled.

Runs the demo's stack on fresh topics and a scratch store and checkpoint root (under the run
folder): the broker (started unless one of this run folder's is up), the supervisor with both Spark
jobs, their warm standbys (`--standby`, as `make demo` runs them; `--no-standby` leaves them out)
and the simulator at `--rate` tx/s, and the dashboard (Streamlit) with a headless Chromium
(`/usr/bin/chromium`, Playwright) opening its Overview every `--browse-every-s` and keeping it open
`--browse-for-s` (its charts refresh meanwhile, as for a user watching it; `--no-dashboard` leaves
both out). Every `--fault-every-s` it issues the next fault of the cycle sink-down, task-failure,
crash-after-sink, broker-down, crash, with the catalogue's defaults, through the command table as
the dashboard's buttons and `python -m pipelines.control` do; crash and crash-after-sink target
the usage job on even cycles and the fraud job on odd ones.

Memory is what the supervisor's housekeeping samples (`process_memory`, every
MEMORY_SAMPLE_SECONDS, set to `--sample-s`, 60): one line a minute with each process's newest RSS.
At the end the simulator is paused and the jobs drain (until the live audit shows lag 0 for the
fraud job and the exactly-once usage query, at most `--drain-s`), the consistent-cut audit runs
(`pipelines.audit.snapshot`), everything started is stopped and checked gone, and the last line is
one JSON object:

    {minutes, rate, standby, dashboard, faults: {issued, done, failed, by_kind}, fault_log,
     rss_mb: {process: [first, at_10_min, last]}, growth_pct: {process: %}, growth_from_minute,
     process_growth_pct: {process: {pct, pid, minutes} | null},
     pids: {process: how many processes held the role}, store_bytes: [first, last],
     checkpoint_bytes: [first, last], kafka_bytes: [first, last], sink_ledger_rows / _bytes,
     card_profiles_rows / _bytes, realtime_seed_rows / _bytes: [first, last], audit: {...}, exact,
     left_running}

The sink ledger and the card profiles are the store's two tables that grow with the input; the
housekeeping prunes both (`pipelines/supervisor/housekeeping.py`), and their rows and bytes (their
pages and their indexes', SQLite's dbstat) are sampled with the rest. The real-time seed is what a
real-time start loads into the executor's memory (null when the fraud job runs micro-batches).

`process_growth_pct` is per process, never across a takeover: for each role the largest growth of
one pid from its sample at minute 10 of the run (and 10 minutes into its own life) to its last,
over at least 10 minutes of samples: {pct, pid, minutes}, or null when no process of the role
lived that long. `growth_pct` is from the sample at minute 10 to the last; with `--minutes` under 10, `at_10_min`
is the last sample and the growth is from minute 1 (`growth_from_minute` says which). A name is a
role: after a takeover `usage` is another process (`pids` counts them), so its line compares two.
The bench exits 1 (its JSON printed first) when the exactly-once figures are not exact at the end:
the exactly-once usage query or the fraud job lost or duplicated a transaction.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from bench.common import delete_topics, own_broker
from bench.harness import dashboard
from bench.harness.dashboard import CHROMIUM, CHROMIUM_ARGS
from controlplane import commands
from controlplane.clock import now_ms
from controlplane.store import connect
from infra.config import ROOT, load
from pipelines import audit

CYCLE = ("sink-down", "task-failure", "crash-after-sink", "broker-down", "crash")
JOB_FAULTS = ("crash", "crash-after-sink")  # these alternate usage / fraud per cycle
GROWING = (("table:sink_batches", "sink_ledger"), ("table:card_profiles", "card_profiles"),
           ("realtime-seed", "realtime_seed"))


def log(message: str) -> None:
    print(f"bench soak: {message}", file=sys.stderr, flush=True)


def say(line: str) -> None:
    """A progress line (stdout: the JSON stays the last line)."""
    print(line, flush=True)


# --- figures (pure) -------------------------------------------------------------------------------

def fault_at(i: int) -> tuple[str, str | None]:
    """The i-th fault of the soak (0-based): its kind and target (None: the catalogue's default)."""
    kind = CYCLE[i % len(CYCLE)]
    if kind in JOB_FAULTS:
        return kind, ("usage", "fraud")[(i // len(CYCLE)) % 2]
    return kind, None


def at_or_after(samples: list[tuple[int, float]], ts: int) -> tuple[int, float] | None:
    """The first (ts, value) sample at or after `ts` (samples sorted by ts)."""
    return next((s for s in samples if s[0] >= ts), None)


def memory_figures(rows: list[tuple[int, str, int, float]], t0_ms: int, minutes: float,
                   slack_ms: int = 10_000) -> dict:
    """From (ts, process, pid, rss_mb) samples: per process [first, at minute 10, last] RSS, the
    growth between minute 10 (minute 1 for a run under 10 minutes) and the last sample, and how
    many pids held the role. Samples up to the end of the soak's minutes (+ slack) count."""
    end = t0_ms + int(minutes * 60_000) + slack_ms
    base_minute = 10 if minutes >= 10 else 1
    by: dict[str, list[tuple[int, float]]] = {}
    pids: dict[str, set] = {}
    per_pid: dict[tuple[str, int], list[tuple[int, float]]] = {}
    for ts, process, pid, rss in sorted(rows):
        if t0_ms - slack_ms <= ts <= end:
            by.setdefault(process, []).append((ts, rss))
            pids.setdefault(process, set()).add(pid)
            per_pid.setdefault((process, pid), []).append((ts, rss))
    rss_mb, growth = {}, {}
    for process, samples in sorted(by.items()):
        first, last = samples[0], samples[-1]
        ten = at_or_after(samples, t0_ms + 10 * 60_000 - slack_ms) if minutes >= 10 else None
        ten = ten or last
        base = ten if base_minute == 10 else at_or_after(samples, t0_ms + 60_000 - slack_ms)
        rss_mb[process] = [round(first[1]), round(ten[1]), round(last[1])]
        if base is not None and base[0] < last[0] and base[1] > 0:
            growth[process] = round((last[1] - base[1]) / base[1] * 100, 1)
        else:
            growth[process] = None  # no sample after the base one: no growth to speak of
    return {"rss_mb": rss_mb, "growth_pct": growth, "growth_from_minute": base_minute,
            "pids": {p: len(v) for p, v in sorted(pids.items())},
            "process_growth_pct": process_growth(per_pid, t0_ms + base_minute * 60_000 - slack_ms)}


def process_growth(per_pid: dict[tuple[str, int], list[tuple[int, float]]], from_ms: int,
                   warm_ms: int = 10 * 60_000) -> dict[str, dict | None]:
    """Per role, the largest growth of one process (one pid) over the samples from `from_ms` and
    at least `warm_ms` into its own life to its last, among the processes with `warm_ms` of such
    samples: {"pct", "pid", "minutes"}; None when no process of the role lived that long. A role's
    line in `growth_pct` can compare two processes (a takeover); this one never does."""
    out: dict[str, dict | None] = {}
    for (process, pid), samples in sorted(per_pid.items()):
        out.setdefault(process, None)
        base = at_or_after(samples, max(from_ms, samples[0][0] + warm_ms))
        last = samples[-1]
        if base is None or last[0] - base[0] < warm_ms or base[1] <= 0:
            continue
        pct = round((last[1] - base[1]) / base[1] * 100, 1)
        if out[process] is None or pct > out[process]["pct"]:
            out[process] = {"pct": pct, "pid": pid, "minutes": round((last[0] - base[0]) / 60_000)}
    return out


def first_last(rows: list[tuple[int, int]]) -> list[int | None]:
    rows = sorted(rows)
    return [rows[0][1], rows[-1][1]] if rows else [None, None]


def mib(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**20:,.1f} MiB"


def _count(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def progress_line(minute: int, newest: dict[str, float], faults: list[dict]) -> str:
    done = sum(1 for f in faults if f["status"] == commands.DONE)
    rss = ", ".join(f"{p} {v:,.0f}" for p, v in sorted(newest.items()))
    return f"minute {minute}: RSS MB {rss or 'no sample yet'}; faults issued {len(faults)} ({done} done)"


def verdict(audit: dict) -> tuple[bool, str]:
    """Exact: the exactly-once usage query and the fraud job lost and duplicated nothing, over a
    truth that is not empty (a soak whose jobs never committed a batch proves nothing)."""
    eo, fraud = audit["usage_exactly_once"], audit["fraud"]
    bad = [f"{name} {k} {fig[k]}" for name, fig in (("usage exactly-once", eo), ("fraud", fraud))
           for k in ("lost", "duplicated") if fig.get(k)]
    bad += [f"{name}: nothing audited (truth 0)" for name, fig in (("usage exactly-once", eo), ("fraud", fraud))
            if not fig.get("truth")]
    return (not bad), ("; ".join(bad) if bad else
                       f"exact: lost 0, duplicated 0 (usage exactly-once truth {eo['truth']:,}, fraud {fraud['truth']:,})")


# --- processes ------------------------------------------------------------------------------------

def started_by(marker: str) -> list[tuple[int, str]]:
    """(pid, command) of every live process whose environment carries `marker` (NAME=value): the
    supervisor, the jobs, their JVMs and Python workers, the simulator and the dashboard inherit it."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker.encode() not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        if state != "Z":
            out.append((int(proc.name), cmd[:160]))
    return out


def stop(proc: subprocess.Popen | None, timeout: float) -> None:
    """SIGTERM the process (its own group), wait, then SIGKILL the group."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


class Viewer(threading.Thread):
    """A user with the Overview open: once the jobs run (`go` set), every `every` s a headless
    Chromium loads the page, waits for it to be drawn (its title, then its charts, which need
    decisions), keeps it open `stay` s (the page refreshes itself meanwhile) and closes. Started
    after the jobs' first batches: on two cores a browser beside four starting JVMs delays them."""

    def __init__(self, base: str, every: float, stay: float):
        super().__init__(name="viewer", daemon=True)
        self.base, self.every, self.stay = base, every, stay
        self.go, self.stop_event = threading.Event(), threading.Event()
        self.loads, self.with_charts, self.failures, self.last_error = 0, 0, 0, None

    def run(self) -> None:
        # deferred: playwright only where a browser runs
        from playwright.sync_api import sync_playwright

        while not self.go.wait(1.0):
            if self.stop_event.is_set():
                return
        with sync_playwright() as p:
            while not self.stop_event.is_set():
                started = time.monotonic()
                try:
                    browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
                    try:
                        page = browser.new_page(viewport={"width": 1400, "height": 1000})
                        page.goto(self.base, wait_until="domcontentloaded", timeout=60_000)
                        page.locator("h1", has_text="Overview").first.wait_for(timeout=60_000)
                        self.loads += 1
                        try:
                            page.locator(".js-plotly-plot").first.wait_for(timeout=30_000)
                            self.with_charts += 1
                        except Exception:  # noqa: BLE001 - no decision yet: the page says so instead
                            pass
                        self.stop_event.wait(self.stay)
                    finally:
                        browser.close()
                except Exception as exc:  # noqa: BLE001 - a failed load is counted, the soak goes on
                    self.failures += 1
                    self.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
                    log(f"the Overview did not load: {self.last_error}")
                self.stop_event.wait(max(1.0, self.every - (time.monotonic() - started)))


# --- the run --------------------------------------------------------------------------------------

def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench soak")
    p.add_argument("--minutes", type=float, default=60.0, help="how long the stack runs (60)")
    p.add_argument("--rate", type=float, default=500.0, help="simulator rate, tx/s (500)")
    p.add_argument("--fault-every-s", type=float, default=120.0, help="seconds between two faults (120)")
    p.add_argument("--sample-s", type=float, default=60.0, help="MEMORY_SAMPLE_SECONDS for the supervisor (60)")
    p.add_argument("--drain-s", type=float, default=240.0, help="at most this long for the jobs to drain (240)")
    p.add_argument("--browse-every-s", type=float, default=180.0, help="how often Chromium opens the Overview")
    p.add_argument("--browse-for-s", type=float, default=20.0, help="how long it keeps it open")
    p.add_argument("--no-standby", dest="standby", action="store_false", help="no warm standbys")
    p.add_argument("--no-dashboard", dest="dashboard", action="store_false", help="no dashboard, no browser")
    p.add_argument("--json", action="store_true", help="(the last line is always JSON)")
    return p.parse_args(argv)


def scratch_world(args, s) -> tuple[str, Path, dict[str, str]]:
    """(tag, folder, environment) of the soak's own topics, store and checkpoint root."""
    s.run_dir.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    work = s.run_dir / f"soak-{time.strftime('%Y%m%d-%H%M%S')}-{tag}"
    work.mkdir(parents=True)
    topics = {"TOPIC_TRANSACTIONS": f"soak-tx-{tag}", "TOPIC_LABELS": f"soak-labels-{tag}",
              "TOPIC_DECISIONS": f"soak-decisions-{tag}", "TOPIC_DLQ": f"soak-dlq-{tag}",
              "TOPIC_MARKERS": f"soak-markers-{tag}", "TOPIC_DECISIONS_RT": f"soak-decisions-rt-{tag}"}
    env = {**os.environ, **topics, "PYTHONPATH": str(ROOT), "CARDSTREAM_DB": str(work / "cardstream.db"),
           "CHECKPOINT_ROOT": str(work / "checkpoints"), "MEMORY_SAMPLE_SECONDS": f"{args.sample_s:g}",
           "STANDBY": "1" if args.standby else "0"}
    env.pop("DASHBOARD_TOKEN", None)  # the bench's browser only reads
    return tag, work, env


def start_supervisor(args, env: dict, work: Path) -> subprocess.Popen:
    log(f"starting the supervisor (fraud, usage{', standbys' if args.standby else ''}, simulator at "
        f"{args.rate:g} tx/s); store, checkpoints and logs in {work}")
    with open(work / "supervisor.log", "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "pipelines.supervisor", "--jobs", "fraud,usage",
                                 "--with-simulator", "--simulator-args", f"--rate {args.rate:g}",
                                 *(["--standby"] if args.standby else [])],
                                env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def start_dashboard(args, s, env: dict, work: Path) -> tuple[subprocess.Popen | None, "Viewer | None", dict]:
    """The dashboard and the browser that opens its Overview (unless --no-dashboard): (its
    process, the viewer, what the JSON says of them)."""
    if not args.dashboard:
        return None, None, {"running": False, "why": "--no-dashboard"}
    try:
        dash, base = dashboard.start(env, work / "dashboard.log", port=s.dashboard_port, unset=("DASHBOARD_TOKEN",),
                                     start_timeout_s=90)
    except RuntimeError as exc:
        raise SystemExit(f"bench soak: {exc}") from None
    viewer = None
    if CHROMIUM.exists():
        viewer = Viewer(base, args.browse_every_s, args.browse_for_s)
        viewer.start()
    else:
        log(f"no Chromium at {CHROMIUM}: the dashboard runs but no page is opened")
    return dash, viewer, {"running": True, "browser": CHROMIUM.exists(), "every_s": args.browse_every_s,
                          "stay_s": args.browse_for_s}


def stop_everything(sup, dash, viewer: "Viewer | None", marker: str, result: dict) -> None:
    """The viewer's counts into the result, the supervisor (its jobs stop between batches) and the
    dashboard stopped, and anything still carrying the soak's marker killed and named."""
    if viewer is not None:
        viewer.stop_event.set()
        viewer.join(timeout=30)
        result["dashboard"].update(page_loads=viewer.loads, loads_with_charts=viewer.with_charts,
                                   load_failures=viewer.failures, last_error=viewer.last_error)
    log("stopping the supervisor (its jobs stop between batches) and the dashboard")
    stop(sup, 120)
    stop(dash, 20)
    deadline = time.monotonic() + 30  # a JVM exits a moment after its driver
    while (left := started_by(marker)) and time.monotonic() < deadline:
        time.sleep(1)
    for pid, cmd in left:
        log(f"left running: pid {pid}: {cmd}; killing it")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    result["left_running"] = [cmd for _, cmd in left]


def collect_figures(db, result: dict, fault_log: list[dict], t0_ms: int, end_ms: int, minutes: float) -> None:
    """Memory, bytes on disk and the faults' outcomes, from the soak's store, into the result."""
    rows = db.execute("SELECT ts, process, pid, rss_mb FROM process_memory ORDER BY ts").fetchall()
    result.update(memory_figures(rows, t0_ms, minutes))
    for what, key in (("store", "store_bytes"), ("checkpoints", "checkpoint_bytes"), ("kafka", "kafka_bytes")):
        result[key] = first_last(db.execute("SELECT ts, bytes FROM storage_bytes WHERE what = ? AND ts <= ?",
                                            [what, end_ms + 10_000]).fetchall())
    # the two tables that grow with the input, and the real-time seed the executor holds in memory
    for what, key in GROWING:
        for column in ("bytes", "rows"):
            result[f"{key}_{column}"] = first_last(db.execute(
                f"SELECT ts, {column} FROM storage_bytes WHERE what = ? AND ts <= ?", [what, end_ms + 10_000]).fetchall())
    statuses = {r[0]: r for r in db.execute("SELECT id, status, result FROM commands").fetchall()}
    for f in fault_log:
        f["status"], f["result"] = statuses[f.pop("id")][1:]
        f["result"] = (f["result"] or "")[:160]
    result["faults"] = {"issued": len(fault_log), "done": sum(f["status"] == "done" for f in fault_log),
                        "failed": sum(f["status"] == "failed" for f in fault_log),
                        "by_kind": {k: sum(f["kind"] == k for f in fault_log) for k in CYCLE}}
    result["fault_log"] = fault_log


def report(result: dict, minutes: float, why: str) -> None:
    """The summary lines: each process's memory, the bytes on disk, the faults and the audit."""
    for process, (first, ten, last) in result["rss_mb"].items():
        growth = result["growth_pct"][process]
        say(f"{process}: RSS first {first:,}, {'minute 10' if minutes >= 10 else 'at_10_min (= last)'} {ten:,}, "
            f"last {last:,} MB; "
            + (f"growth {growth:+.1f} % from minute {result['growth_from_minute']}" if growth is not None
               else "no growth figure (no sample after its base one)")
            + (f" ({result['pids'][process]} processes held the role)" if result["pids"][process] > 1 else "")
            + (f"; one process over {pg['minutes']} min: {pg['pct']:+.1f} %"
               if (pg := result["process_growth_pct"].get(process)) else ""))
    say("on disk, first → last: " + ", ".join(f"{what} {mib(result[key][0])} → {mib(result[key][1])}" for what, key in
                                              (("store", "store_bytes"), ("checkpoints", "checkpoint_bytes"),
                                               ("broker data", "kafka_bytes")))
        + "; " + ", ".join(f"{key.replace('_', ' ')} {_count(result.get(key + '_rows', [None])[0])} → "
                           f"{_count(result.get(key + '_rows', [None, None])[-1])} rows, "
                           f"{mib(result.get(key + '_bytes', [None])[0])} → {mib(result.get(key + '_bytes', [None, None])[-1])}"
                           for _, key in GROWING)
        + f"; faults {result['faults']['issued']} issued, {result['faults']['done']} done; audit: {why}")


def main(argv: list[str]) -> dict:
    args = parse_args(argv)
    s = load()
    if s.external_bootstrap:
        raise SystemExit("bench soak: broker-down needs the local broker; unset KAFKA_BOOTSTRAP.")
    tag, work, env = scratch_world(args, s)
    bench_s = load(env)
    marker = f"CARDSTREAM_DB={env['CARDSTREAM_DB']}"
    db = connect(bench_s.store_path)
    sup = dash = viewer = None
    fault_log: list[dict] = []
    result: dict = {"minutes": args.minutes, "rate": args.rate, "standby": args.standby,
                    "fault_every_s": args.fault_every_s, "sample_s": args.sample_s, "work": str(work)}
    with own_broker(s, log):
        try:
            sup = start_supervisor(args, env, work)
            t0, t0_ms = time.monotonic(), now_ms()
            dash, viewer, result["dashboard"] = start_dashboard(args, s, env, work)
            result["jobs_up_s"] = soak(args, db, sup, t0, fault_log, viewer)
            end_ms = now_ms()
            result["audit"] = drain(args, db, bench_s, sup)
        finally:
            stop_everything(sup, dash, viewer, marker, result)
            delete_topics(s, tag, log)
    collect_figures(db, result, fault_log, t0_ms, end_ms, args.minutes)
    exact, why = verdict(result["audit"])
    result["exact"] = exact
    report(result, args.minutes, why)
    if not exact:
        print(json.dumps(result), flush=True)  # the figures stay the last stdout line
        raise SystemExit(f"bench soak: not exact at the end: {why}; logs in {work}")
    return result


def soak(args, db, sup: subprocess.Popen, t0: float, fault_log: list[dict], viewer: "Viewer | None") -> float | None:
    """The soak's minutes: a line every minute; once both jobs have committed a batch with rows, a
    fault every `fault_every_s` (the first at `fault_every_s` after the start at the earliest) and
    the browser. Returns when the jobs were up (s after the start; None: never)."""
    total = args.minutes * 60
    next_fault, next_minute, up, i = args.fault_every_s, 1, None, 0

    def minute_line(minute: int) -> None:
        newest = dict(db.execute("SELECT process, rss_mb FROM process_memory WHERE ts = "
                                 "(SELECT max(ts) FROM process_memory)").fetchall())
        statuses = {r[0]: r[1] for r in db.execute("SELECT id, status FROM commands").fetchall()}
        say(progress_line(minute, newest, [{"status": statuses.get(f["id"])} for f in fault_log]))

    while (elapsed := time.monotonic() - t0) < total:
        if sup.poll() is not None:
            raise SystemExit(f"bench soak: the supervisor exited with {sup.returncode} after {elapsed:.0f} s")
        if up is None and all(db.execute("SELECT count(*) FROM batch_progress WHERE query LIKE ? AND "
                                         "num_input_rows > 0", [pattern]).fetchone()[0]
                              for pattern in ("fraud", "usage-%")):
            up = round(elapsed)
            log(f"both jobs committed a batch with rows {elapsed:.0f} s after the start")
            if viewer is not None:
                viewer.go.set()
        if up is not None and elapsed >= next_fault:
            kind, job = fault_at(i)
            cid = commands.issue(db, kind, job)
            row = commands.get(db, cid)
            fault_log.append({"id": cid, "at_s": round(elapsed), "kind": kind, "job": row["job"] or "broker"})
            log(f"fault {i + 1}: {kind} ({row['job'] or 'the broker'}) issued, command {cid}")
            i += 1
            next_fault = max(next_fault + args.fault_every_s, elapsed + args.fault_every_s / 2)
        if elapsed >= next_minute * 60:
            minute_line(next_minute)
            next_minute += 1
        time.sleep(0.5)
    if next_minute <= args.minutes:  # the last minute, once its sample is in
        time.sleep(min(5.0, args.sample_s / 4))
        minute_line(next_minute)
    if up is None:
        log(f"the jobs committed no batch with rows in {args.minutes:g} minutes: no fault was issued")
    return up


def _lags(db, since_ms: int) -> dict[str, int | None]:
    """The newest live-audit lag (records) of the fraud job and the exactly-once usage query."""
    out = {}
    for key, job, guarantee, metric in (("fraud", "fraud", "", "decisions"),
                                        ("usage_exactly_once", "usage", "exactly-once", "processed")):
        row = db.execute("SELECT lag_records FROM audit WHERE job = ? AND guarantee = ? AND metric = ? AND ts > ? "
                         "ORDER BY ts DESC LIMIT 1", [job, guarantee, metric, since_ms]).fetchone()
        out[key] = row[0] if row else None
    return out


def drain(args, db, bench_s, sup: subprocess.Popen) -> dict:
    """Pause the simulator, let the faults in flight finish and the jobs catch up, then audit."""
    started = time.monotonic()
    deadline = started + args.drain_s
    cid = commands.issue(db, "pause", "simulator")
    while commands.get(db, cid)["status"] == commands.PENDING and time.monotonic() < deadline:
        time.sleep(0.5)
    paused_ms = now_ms()
    log("simulator paused; waiting for the faults in flight and for the jobs to catch up")
    while time.monotonic() < deadline:
        busy = db.execute("SELECT count(*) FROM commands WHERE status IN ('pending', 'started')").fetchone()[0]
        lags = _lags(db, paused_ms)
        if not busy and all(v == 0 for v in lags.values()):
            break
        if sup.poll() is not None:
            raise SystemExit(f"bench soak: the supervisor exited with {sup.returncode} while draining")
        time.sleep(2)
    drained = time.monotonic() < deadline
    log(f"{'drained' if drained else 'not drained'} after {time.monotonic() - started:.0f} s; auditing")
    snap = audit.snapshot(bench_s, db)
    eo, fraud = snap["usage"]["exactly-once"], snap["fraud"]
    keys = ("truth", "observed", "lost", "duplicated", "replayed", "upstream", "lag_records")
    return {"usage_exactly_once": {k: eo.get(k) for k in keys},
            "fraud": {k: fraud.get(k) for k in ("truth", "observed", "lost", "duplicated", "topic_lost", "lag_records")},
            "drained": drained, "drain_s": round(time.monotonic() - started, 1)}
