"""The token rule for the buttons that change something (faults, simulator controls).

Read-only pages are always open. The buttons ask for a token when DASHBOARD_TOKEN is set, and
always when the dashboard listens beyond loopback: then, without a token configured, they stay
locked, because anyone on the network could otherwise crash the jobs.
"""
from __future__ import annotations

import hmac
import ipaddress
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
