"""Guessing the dashboard token is slowed down, and the token never reaches the jobs."""
from __future__ import annotations

from dashboard.auth import Throttle
from pipelines.supervisor.processes import child_env


def test_each_wrong_token_in_a_row_doubles_the_wait_and_a_right_one_resets_it():
    waits = []
    t = Throttle(base_s=0.5, cap_s=2.0, sleep=waits.append)
    for _ in range(4):
        assert not t.check("guess", "0.0.0.0", "secret").allowed
    assert t.check("secret", "0.0.0.0", "secret").allowed
    assert not t.check("guess", "0.0.0.0", "secret").allowed
    assert waits == [0.0, 0.5, 1.0, 2.0, 2.0, 0.0]  # capped; reset by the right token


def test_no_wait_when_no_token_is_needed_or_none_was_given():
    waits = []
    t = Throttle(sleep=waits.append)
    assert t.check(None, "127.0.0.1", None).allowed
    assert not t.check(None, "0.0.0.0", "secret").allowed  # nothing entered: refused, not counted
    assert waits == [] and t.wrong == 0


def test_the_token_is_withheld_from_the_children():
    env = child_env({"DASHBOARD_TOKEN": "secret", "KAFKA_PORT": "19092"})
    assert env == {"KAFKA_PORT": "19092"}
