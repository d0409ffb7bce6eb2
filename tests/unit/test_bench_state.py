"""`bench state`'s plain part: the bytes a batch wrote are the files modified since it started."""
from __future__ import annotations

import dataclasses
import os
import time

from bench.common import scratch
from bench.state import written_since
from infra.config import load


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


def test_a_bench_scratch_world_has_its_own_folder_topics_and_store(tmp_path):
    s = dataclasses.replace(load(), run_dir=tmp_path / "run")
    tag, work, topics, env = scratch(s, "state")
    tag2, work2, topics2, _ = scratch(s, "state")
    assert work.is_dir() and work.parent == s.run_dir and work != work2 and tag != tag2
    assert topics["TOPIC_TRANSACTIONS"] == f"bench-state-tx-{tag}" and len(set(topics.values())) == 5
    assert not set(topics.values()) & set(topics2.values())
    assert env["CARDSTREAM_DB"] == str(work / "cardstream.db") and env["CHECKPOINT_ROOT"] == str(work / "checkpoints")
    assert all(env[k] == v for k, v in topics.items())
