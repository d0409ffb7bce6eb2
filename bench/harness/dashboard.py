"""The dashboard served by a real `streamlit run dashboard/app.py`, and the Chromium that opens it:
shared by the benchmarks (charts, soak) and the browser tests."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from infra.config import ROOT
from infra.daemons import free_ports

CHROMIUM = Path("/usr/bin/chromium")  # Debian's (infra/install-chromium.sh), driven by Playwright
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def start(env: dict, log_path: Path, port: int | None = None, unset: tuple[str, ...] = (),
          start_timeout_s: float = 60.0) -> tuple[subprocess.Popen, str]:
    """Start serving the dashboard on 127.0.0.1 (`port`, else a free one) with `env` over this
    process's environment (`unset` taken out of it), in a process group of its own; (the process,
    its base URL) once it answers, RuntimeError with its log's tail when it does not."""
    [port] = [port] if port else free_ports(1)
    env = {k: v for k, v in {**os.environ, "PYTHONPATH": str(ROOT), **env}.items() if k not in unset}
    with open(log_path, "a") as log:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "dashboard/app.py",
                                 "--server.address", "127.0.0.1", "--server.port", str(port),
                                 "--server.headless", "true", "--browser.gatherUsageStats", "false"],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + start_timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return proc, base
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            stop(proc)
            raise RuntimeError(f"streamlit did not start on {base}: " + log_path.read_text()[-2000:])
        time.sleep(0.3)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def served(env: dict, log_path: Path, unset: tuple[str, ...] = (), start_timeout_s: float = 60.0):
    """The dashboard served (`start`) on a free port while the block runs: its base URL."""
    proc, base = start(env, log_path, unset=unset, start_timeout_s=start_timeout_s)
    try:
        yield base
    finally:
        stop(proc)
