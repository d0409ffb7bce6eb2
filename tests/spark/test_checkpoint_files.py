"""Checkpoint files on the local disk, as the session writes them (pipelines/engine/session.py):
Hadoop's FileSystem API (one rename per file, not FileContext's forked `readlink`s) and our local
file system (infra/localfs: permissions through java.nio, not a forked `chmod`). What must hold:
the same permissions, a finished file never overwritten by a second writer of the same batch,
and a query's state read back from its checkpoint."""
from __future__ import annotations

import json
import os
import stat

from pipelines.engine.session import LOCAL_FS_CLASS


def hadoop_path(spark, path):
    return spark._jvm.org.apache.hadoop.fs.Path(str(path))


def test_the_local_file_system_sets_permissions_without_a_process(spark, tmp_path):
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI.create("file:///"), conf)
    assert fs.getClass().getName() == LOCAL_FS_CLASS
    target = tmp_path / "f"
    target.write_text("x")
    perm = jvm.org.apache.hadoop.fs.permission.FsPermission
    fs.setPermission(hadoop_path(spark, target), perm.createImmutable(0o640))
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    folder = tmp_path / "d"
    assert fs.mkdirs(hadoop_path(spark, folder), perm.createImmutable(0o750))
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o750
    # a created file keeps the default permission under the umask, as Hadoop's own would
    out = fs.create(hadoop_path(spark, tmp_path / "g"), True)
    out.write(b"y")
    out.close()
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(tmp_path / "g").st_mode) == 0o666 & ~umask


def test_a_finished_checkpoint_file_is_never_overwritten(spark, tmp_path):
    jvm = spark._jvm
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(
        hadoop_path(spark, tmp_path), spark._jsparkSession.sessionState().newHadoopConf())
    assert manager.getClass().getSimpleName() == "FileSystemBasedCheckpointFileManager"
    first = manager.createAtomic(hadoop_path(spark, tmp_path / "0"), False)
    first.write(b"first")
    first.close()
    second = manager.createAtomic(hadoop_path(spark, tmp_path / "0"), False)
    second.write(b"second")
    try:
        second.close()
        raised = None
    except Exception as exc:  # noqa: BLE001 - py4j wraps Java's FileAlreadyExistsException
        raised = str(exc)
    assert raised and "FileAlreadyExists" in raised
    assert (tmp_path / "0").read_bytes() == b"first"
    # the loser's temporary file stays (Spark's stream marks itself closed before the rename
    # fails, so its cancel() does nothing, with either manager); the metadata log reads numbered
    # files only
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == ["0"]


def test_a_stateful_query_resumes_from_its_checkpoint(spark, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    checkpoint = tmp_path / "checkpoint"
    seen: list[dict] = []

    def run():
        frame = spark.readStream.schema("k string").option("maxFilesPerTrigger", 1).json(str(folder))
        query = (frame.groupBy("k").count().writeStream.outputMode("update")
                 .foreachBatch(lambda df, _: seen.extend(r.asDict() for r in df.collect()))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None

    (folder / "0.json").write_text("\n".join(json.dumps({"k": k}) for k in "aab"))
    run()
    (folder / "1.json").write_text("\n".join(json.dumps({"k": k}) for k in "abb"))
    run()
    # the second run's counts carry on from the first run's state
    assert sorted(seen[-2:], key=lambda r: r["k"]) == [{"k": "a", "count": 3}, {"k": "b", "count": 3}]
    assert sorted(p.name for p in (checkpoint / "commits").iterdir() if not p.name.startswith(".")) == ["0", "1"]
