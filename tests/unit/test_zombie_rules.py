"""When the supervisor wakes a `zombie` fault's frozen instance (pure rule, no processes): after its
`seconds`, and not before its replacement holds a newer epoch, so it always wakes stale; a
replacement that died is not waited for, nor one still starting ZOMBIE_TIMEOUT_S later."""
from __future__ import annotations

from pathlib import Path

from pipelines.supervisor.faults import ZOMBIE_TIMEOUT_S, Zombie, zombie_wakes


def frozen(resume_at: float = 100.0) -> Zombie:
    return Zombie("usage", None, 1, resume_at, Path("usage.log"), epoch=3)


def test_a_zombie_wakes_after_its_seconds_once_the_replacement_holds_the_lease():
    z = frozen()
    assert not zombie_wakes(z, stale=True, replacement_starting=True, now=99.0)   # its seconds not yet over
    assert zombie_wakes(z, stale=True, replacement_starting=True, now=100.0)


def test_a_replacement_still_starting_on_a_loaded_machine_is_waited_for():
    """Woken before the replacement took the lease, the zombie would still be the holder: it would
    write, and with no batch left to write once the replacement took over, nothing would fence it."""
    z = frozen()
    assert not zombie_wakes(z, stale=False, replacement_starting=True, now=130.0)
    assert not zombie_wakes(z, stale=False, replacement_starting=True, now=100.0 + ZOMBIE_TIMEOUT_S - 1)
    assert zombie_wakes(z, stale=False, replacement_starting=True, now=100.0 + ZOMBIE_TIMEOUT_S)


def test_a_replacement_that_died_is_not_waited_for():
    """It could not take the lease (the zombie froze inside a store write, holding the write lock)."""
    assert zombie_wakes(frozen(), stale=False, replacement_starting=False, now=100.0)


def test_a_zombie_is_woken_once():
    z = frozen()
    z.resumed_at = 100.0
    assert not zombie_wakes(z, stale=True, replacement_starting=True, now=200.0)
