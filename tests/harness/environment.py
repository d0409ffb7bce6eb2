"""The test session's settings are its own, whatever the shell exported.

Why: every job, broker and Spark session a test starts inherits the session's environment, so a
CardStream variable left exported in a shell (SPARK_UI=0 from a hand run, FRAUD_MODE=realtime from
trying the real-time path, KAFKA_BOOTSTRAP of a demo's cluster) changed what the tests ran, and
`make test`'s verdict depended on the shell it was typed in (it did: SPARK_UI=0 failed the
first-minute walk, bench/RESULTS.md#test-suite). Only where things are and which ports to use
come from the shell.
"""
from __future__ import annotations

from collections.abc import MutableMapping

from infra.config import load

# where things are and which ports to use: a shell may move them (a demo running on the defaults)
KEPT = frozenset({"CARDSTREAM_RUN_DIR", "CARDSTREAM_JARS_DIR", "HANDBOOK_DATA", "KAFKA_PORT",
                  "KAFKA_CONTROLLER_PORT", "SPARK_MASTER_PORT", "SPARK_MASTER_UI_PORT", "HDFS_PORT"})
# read beside infra.config: the log level (infra/logs.py), the JVM options tests/conftest.py sets
ALSO_READ = frozenset({"CARDSTREAM_LOG_LEVEL", "SPARK_SUBMIT_OPTS"})


class _Reads(dict):
    """An empty environment that notes every name asked of it."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def get(self, name, default=None):
        self.names.add(name)
        return default

    def __contains__(self, name):
        self.names.add(name)
        return False


def settings_variables() -> frozenset[str]:
    """Every variable `infra.config.load` reads (found by running it on an environment that notes
    what it is asked), and those read beside it."""
    reads = _Reads()
    load(reads)
    return frozenset(reads.names) | ALSO_READ


def own_settings(environ: MutableMapping[str, str]) -> dict[str, str]:
    """Remove from `environ` the settings the tests do not take from the shell; {name: value} removed."""
    return {name: environ.pop(name) for name in sorted(settings_variables() - KEPT) if name in environ}
