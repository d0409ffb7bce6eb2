"""infra/heap.py: without it, buffers of a few MiB freed behind a small survivor stay in the RSS
(glibc's raised mmap threshold); with the thresholds fixed, or after a trim, they go back to the OS.
Each case in its own interpreter, since the settings are process-wide."""
from __future__ import annotations

import subprocess
import sys

import pytest

from infra import heap
from infra.config import ROOT

CHURN = """
import sys
from infra import heap
def rss(): return int(open('/proc/self/statm').read().split()[1]) * 4096 / 2**20
if sys.argv[1] == "fixed": assert heap.fix_thresholds()
keep, start = [], rss()
for _ in range(30):                                   # audit rounds
    bufs = [bytearray(3 * 2**20) for _ in range(8)]   # a fetch's buffers, touched
    for b in bufs: b[::4096] = b"x" * len(b[::4096])
    keep.append(bytes(200))                           # a small object that outlives them
    del bufs
if sys.argv[1] == "trim": assert heap.trim() in (True, False)
print(rss() - start)
"""


def kept_mib(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", CHURN, mode], cwd=ROOT, capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(ROOT)})
    return float(out.stdout.strip())


@pytest.mark.skipif(heap._LIBC is None, reason="not glibc: infra.heap does nothing there")
def test_freed_buffers_go_back_to_the_os_with_the_thresholds_fixed_or_a_trim():
    untouched, fixed, trimmed = kept_mib("none"), kept_mib("fixed"), kept_mib("trim")
    assert untouched > 12, f"glibc kept only {untouched:.1f} MiB: the case this module is for did not occur"
    assert fixed < untouched / 3 and trimmed < untouched / 3, (untouched, fixed, trimmed)
