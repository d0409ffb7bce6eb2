"""infra.storage: URIs that join like paths without collapsing `//`, and the local half of the reader
on a real folder (the WebHDFS half runs on the real NameNode in tests/cluster/test_spark_cluster.py)."""
from pathlib import Path

import pytest

from infra import storage
from infra.config import load
from infra.storage import Location


def test_join_keeps_the_scheme_and_authority_and_single_slashes():
    assert storage.join("hdfs://nn:8020/", "a", "b/") == "hdfs://nn:8020/a/b"
    assert storage.join("hdfs://nn:8020", "/a/", "", "c") == "hdfs://nn:8020/a/c"
    assert storage.join("s3a://bucket/x") == "s3a://bucket/x"


def test_a_location_joins_names_and_parents_like_a_path():
    root = Location("hdfs://127.0.0.1:9/cardstream/checkpoints/", web="http://127.0.0.1:10", user="u")
    cp = root / "usage-at-most-once"
    assert str(cp) == "hdfs://127.0.0.1:9/cardstream/checkpoints/usage-at-most-once"
    assert cp.path == "/cardstream/checkpoints/usage-at-most-once" and cp.name == "usage-at-most-once"
    assert cp.parent == root and cp.web == "http://127.0.0.1:10" and cp.user == "u"
    assert str(cp.with_name("usage-at-most-once.run-3")).endswith("/checkpoints/usage-at-most-once.run-3")
    assert str(Location("hdfs://h:1/a").parent) == "hdfs://h:1" and Location("hdfs://h:1/a").parent.path == "/"
    assert str(Path("hdfs://h:1/a")) == "hdfs:/h:1/a"  # why Location exists


def test_location_reads_a_setting_or_an_argument():
    assert storage.location("hdfs://h:1/x", "http://h:2") == Location("hdfs://h:1/x", "http://h:2")
    assert storage.location("file:///tmp/cp") == Path("/tmp/cp")
    assert storage.location("rel/cp") == Path("rel/cp").resolve()
    root = Location("hdfs://h:1/x", "http://h:2", "me")
    assert storage.like(root, "hdfs://h:1/y") == Location("hdfs://h:1/y", "http://h:2", "me")
    assert storage.like(Path("/tmp"), "/var/cp") == Path("/var/cp")
    with pytest.raises(storage.StorageError, match="is not a URI"):
        Location("/no/scheme")


def test_the_settings_put_checkpoints_on_the_local_hdfs_with_the_cluster(tmp_path):
    s = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "CLUSTER": "1", "HDFS_PORT": "39520"})
    assert s.hdfs and s.checkpoint_root == Location("hdfs://127.0.0.1:39520/cardstream/checkpoints",
                                                    "http://127.0.0.1:39521")
    assert s.fraud_files == tmp_path / "fraud-files"
    local = load({"CARDSTREAM_RUN_DIR": str(tmp_path)})
    assert not local.hdfs and local.checkpoint_root == tmp_path / "checkpoints"
    assert local.fraud_files == tmp_path / "checkpoints" / "fraud"
    # another HDFS: readable from Python once WEBHDFS names its NameNode
    other = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "CHECKPOINT_ROOT": "hdfs://nn:8020/cp"})
    assert other.checkpoint_root.web is None
    with pytest.raises(storage.StorageError, match="WEBHDFS"):
        storage.read_text(other.checkpoint_root / "metadata")
    named = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "CHECKPOINT_ROOT": "hdfs://nn:8020/cp",
                  "WEBHDFS": "http://nn:9870", "HADOOP_USER_NAME": "spark"})
    assert named.checkpoint_root == Location("hdfs://nn:8020/cp", "http://nn:9870", "spark")


def test_the_local_reader_on_a_real_folder(tmp_path):
    root = tmp_path / "cp"
    assert storage.read_text(root / "metadata") is None and storage.entries(root) == [] and storage.stat(root) is None
    storage.make_dirs(root / "offsets")
    storage.write_text(root / "metadata", "one")
    storage.write_text(root / "metadata", "two")  # replaced whole, nothing left aside
    (root / "offsets" / "0").write_text("v1\n{}")
    (root / "binary").write_bytes(b"\xff\xfe")
    assert storage.read_text(root / "metadata") == "two" and storage.read_text(root / "binary") is None
    assert sorted((e.name, e.is_dir) for e in storage.entries(root)) == [
        ("binary", False), ("metadata", False), ("offsets", True)]
    assert storage.stat(root / "metadata").size == 3 and storage.stat(root).is_dir
    assert storage.total_bytes(root) == 3 + 2 + len("v1\n{}")
    storage.remove(root / "metadata")
    storage.remove(root)
    storage.remove(root)  # absent: nothing to do
    assert not root.exists() and storage.total_bytes(root) == 0
