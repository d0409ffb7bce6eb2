"""One log format for every CardStream process: `python -m ...` entry points call `setup()`.

Lines go to stderr (the supervisor collects each child's output in `.run/logs/<job>.log`):
`2026-11-22 18:40:01,123 usage WARNING sink down for 10 s`.
"""
from __future__ import annotations

import logging
import os

FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def setup(level: str | None = None) -> None:
    logging.basicConfig(level=(level or os.environ.get("CARDSTREAM_LOG_LEVEL") or "INFO").upper(),
                        format=FORMAT, force=True)
    for noisy in ("py4j", "urllib3", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # kafka-python logs its own retries (metadata refreshes, slow selector tasks) as warnings and
    # errors; what matters reaches us as exceptions from the calls, which we log ourselves
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
