"""The fraud checkpoint keeps the state layout it was started with (the processor: a value per card
in the JVM, or the pandas processor's map entry per card under its bucket, and then the bucket
count), and another is refused in one sentence."""
from __future__ import annotations

import json

from pipelines.fraud.job import check_layout


def started(folder):
    (folder / "offsets").mkdir(parents=True)
    (folder / "offsets" / "0").write_text("v1")


def test_a_fresh_checkpoint_records_its_count_and_the_same_count_passes(tmp_path):
    folder = tmp_path / "fraud" / "decisions"
    assert check_layout(folder, 64, "python") is None
    assert json.loads((tmp_path / "fraud" / "decisions-layout.json").read_text()) == {"fraud_state_buckets": 64, "state": "card-map+history"}
    started(folder)
    assert check_layout(folder, 64, "python") is None


def test_another_count_for_a_started_checkpoint_is_refused_in_one_sentence(tmp_path):
    folder = tmp_path / "fraud" / "decisions"
    check_layout(folder, 64, "python")
    started(folder)
    refusal = check_layout(folder, 32, "python")
    assert refusal and "FRAUD_STATE_BUCKETS=64" in refusal and "make clean" in refusal and "\n" not in refusal
    # the record is left as it was: setting the count back works
    assert check_layout(folder, 64, "python") is None


def test_a_deleted_checkpoint_starts_afresh_with_any_count(tmp_path):
    folder = tmp_path / "fraud" / "decisions"
    check_layout(folder, 64, "python")  # recorded, but the checkpoint never ran (or was deleted)
    assert check_layout(folder, 16, "python") is None
    assert json.loads((tmp_path / "fraud" / "decisions-layout.json").read_text()) == {"fraud_state_buckets": 16, "state": "card-map+history"}


def test_a_checkpoint_of_the_older_bucket_json_state_is_refused(tmp_path):
    folder = tmp_path / "fraud" / "decisions"
    started(folder)  # started before the layout was recorded: one JSON value per bucket
    refusal = check_layout(folder, 64, "python")
    assert refusal and "older layout" in refusal and "make clean" in refusal
    assert not (tmp_path / "fraud" / "decisions-layout.json").exists()  # nothing adopted


def test_the_jvm_processor_s_state_is_refused_to_the_pandas_one_and_back(tmp_path):
    folder = tmp_path / "fraud" / "decisions"
    assert check_layout(folder, 64, "jvm") is None
    assert json.loads((tmp_path / "fraud" / "decisions-layout.json").read_text())["state"] == "card-value+history"
    started(folder)
    refusal = check_layout(folder, 64, "python")
    assert refusal and "FRAUD_PROCESSOR=jvm" in refusal and "make clean" in refusal and "\n" not in refusal
    # the JVM processor keys by card: the bucket count does not matter to it
    assert check_layout(folder, 16, "jvm") is None
    other = tmp_path / "other" / "decisions"
    check_layout(other, 64, "python")
    started(other)
    assert "FRAUD_PROCESSOR=python" in check_layout(other, 64, "jvm")
