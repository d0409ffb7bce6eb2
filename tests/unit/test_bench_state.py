"""`bench state`'s plain part: the bytes a batch wrote are the files modified since it started."""
from __future__ import annotations

import os
import time

from bench.state import written_since


def test_only_files_modified_since_count_by_their_blocks(tmp_path):
    old = tmp_path / "1.zip"
    old.write_bytes(b"x" * 10_000)
    os.utime(old, (time.time() - 60, time.time() - 60))
    since = time.time() - 1
    (tmp_path / "sub").mkdir()
    new = tmp_path / "sub" / "2.changelog"
    new.write_bytes(b"y" * 5_000)
    assert written_since(tmp_path, since) == new.stat().st_blocks * 512 >= 5_000
    assert written_since(tmp_path, time.time() - 120) > written_since(tmp_path, since)
    assert written_since(tmp_path / "missing", since) == 0
