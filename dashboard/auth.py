"""The token rule for the buttons that change something (faults, simulator controls).

Read-only pages are always open. The buttons ask for a token when DASHBOARD_TOKEN is set, and
always when the dashboard listens beyond loopback: then, without a token configured, they stay
locked, because anyone on the network could otherwise crash the jobs.
"""
from __future__ import annotations

import hmac
import ipaddress
import threading
import time
from dataclasses import dataclass


def is_loopback(host: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and "localhost"; an empty host means every interface."""
    if not host:
        return False
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str


def token_required(host: str | None, token: str | None) -> bool:
    return bool(token) or not is_loopback(host)


def check(given: str | None, host: str | None, token: str | None) -> Verdict:
    """May a button press with token `given` go through, on a dashboard bound to `host`?"""
    if not token_required(host, token):
        return Verdict(True, "")
    if not token:
        return Verdict(False, f"This dashboard listens on {host or 'every interface'}, beyond loopback, "
                              "and DASHBOARD_TOKEN is not set: the buttons stay locked. Set DASHBOARD_TOKEN "
                              "and restart the dashboard to use them.")
    if not given:
        return Verdict(False, "Enter the dashboard token first: nothing was sent.")
    if hmac.compare_digest(given.encode(), token.encode()):
        return Verdict(True, "")
    return Verdict(False, "Wrong token: nothing was sent.")


class Throttle:
    """Slows down guessing: after each wrong token in a row the next check waits twice as long
    (0.5 s, 1 s, 2 s … capped), for every session of this dashboard process; a right token resets it."""

    def __init__(self, base_s: float = 0.5, cap_s: float = 8.0, sleep=time.sleep):
        self.base_s, self.cap_s, self.sleep = base_s, cap_s, sleep
        self.wrong = 0
        self._lock = threading.Lock()

    def delay_s(self) -> float:
        return 0.0 if self.wrong == 0 else min(self.cap_s, self.base_s * 2 ** (self.wrong - 1))

    def check(self, given: str | None, host: str | None, token: str | None) -> Verdict:
        with self._lock:  # one guess at a time: parallel sessions cannot skip the wait
            if given and token_required(host, token):
                self.sleep(self.delay_s())
            verdict = check(given, host, token)
            if given and token and not verdict.allowed:
                self.wrong += 1
            elif verdict.allowed and given:
                self.wrong = 0
            return verdict


THROTTLE = Throttle()
