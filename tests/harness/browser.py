"""A real `streamlit run dashboard/app.py` and Debian's Chromium for the browser tests."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository: this file is tests/harness/browser.py
CHROMIUM = Path("/usr/bin/chromium")
SHOTS = ROOT / "docs" / "screenshots"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def streamlit(env: dict, log_path: Path):
    """Serve the dashboard on a free port with `env`; yield its base URL; stop it afterwards."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DASHBOARD_REFRESH_SECONDS": "2", **env}
    env.pop("DASHBOARD_TOKEN", None)
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "dashboard/app.py",
                                 "--server.address", "127.0.0.1", "--server.port", str(port),
                                 "--server.headless", "true", "--browser.gatherUsageStats", "false"],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.time() + 60
            while True:
                try:
                    with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.time() > deadline:
                    raise AssertionError("streamlit did not start: " + log_path.read_text()[-2000:])
                time.sleep(0.3)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def chromium():
    """A headless Chromium from Debian; fails loudly (never skips) when it is not installed."""
    if not CHROMIUM.exists():
        pytest.fail(f"Chromium is missing at {CHROMIUM}: install it with infra/install-chromium.sh "
                    "(this test never skips).")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()
