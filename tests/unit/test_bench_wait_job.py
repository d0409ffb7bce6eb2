"""bench.common.wait_job: a job's exit code within its time, else the job killed and one sentence."""
from __future__ import annotations

import subprocess
import sys

import pytest

from bench.common import wait_job


def test_the_exit_code_comes_back(tmp_path):
    job = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert wait_job(job, "quality", tmp_path / "job.log", 30) == 3


def test_a_job_past_its_time_is_killed_and_named_in_one_sentence(tmp_path):
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with pytest.raises(SystemExit) as out:
        wait_job(job, "handbook", tmp_path / "job.log", 0.2)
    assert str(out.value) == f"bench handbook: the fraud job did not finish within 0.2 s; see {tmp_path / 'job.log'}."
    assert job.poll() is not None, "the job is gone"
