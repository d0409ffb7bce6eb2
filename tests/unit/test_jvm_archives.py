"""The class archives' plain rules (infra/jvm.py): an archive is named by what it was built from,
so a rebuilt jar or another JDK gets another name; only an existing archive is mapped; a new one
replaces the same JVM's old ones and no other's."""
from __future__ import annotations

import os

from infra import jvm


def jars(tmp_path, *names):
    out = []
    for n in names:
        (tmp_path / n).write_bytes(b"jar " + n.encode())
        out.append(tmp_path / n)
    return out


def test_the_name_changes_with_a_rebuilt_jar_and_with_another_jdk(tmp_path):
    a, b = jars(tmp_path, "a.jar", "b.jar")
    java = jars(tmp_path, "java")[0]
    before = jvm.fingerprint(java, [a, b])
    assert jvm.fingerprint(java, [a, b]) == before
    os.utime(b, ns=(1, 1))
    assert jvm.fingerprint(java, [a, b]) != before
    other_java = jars(tmp_path, "java-21")[0]
    assert jvm.fingerprint(other_java, [a, b]) != jvm.fingerprint(java, [a, b])


def test_the_archive_is_named_in_its_folder_and_none_without_jars(tmp_path):
    a, b = jars(tmp_path, "a.jar", "b.jar")
    path = jvm.class_archive(tmp_path / "cds", "kafka-broker", [b, a])
    assert path.parent == tmp_path / "cds" and path.name.startswith("kafka-broker-") and path.suffix == ".jsa"
    assert path == jvm.class_archive(tmp_path / "cds", "kafka-broker", [a, b]), "the jars' order does not matter"
    assert jvm.class_archive(tmp_path / "cds", "kafka-broker", []) is None


def test_only_an_existing_archive_is_mapped_and_only_when_archives_are_on(tmp_path):
    path = tmp_path / "spark-driver-0123.jsa"
    assert jvm.archive_options(path) == []
    assert jvm.archive_options(None) == []
    path.write_bytes(b"x")
    assert jvm.archive_options(path) == [f"-XX:SharedArchiveFile={path}"]
    assert jvm.archive_options(path, enabled=False) == []


def test_a_new_archive_replaces_its_own_jvm_s_old_ones_only(tmp_path, capsys):
    old = tmp_path / "spark-driver-aaaa.jsa"
    other = tmp_path / "kafka-broker-bbbb.jsa"
    partial = tmp_path / "spark-driver-cccc.123.partial"
    for p in (old, other, partial):
        p.write_bytes(b"x")
    target = tmp_path / "spark-driver-cccc.jsa"
    assert jvm.finish_archive(partial, target, "the Spark driver", 0, True, 0.0) == target
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kafka-broker-bbbb.jsa", "spark-driver-cccc.jsa"]
    assert "class archive of the Spark driver is ready" in capsys.readouterr().out


def test_a_failed_run_leaves_no_half_archive_and_says_so(tmp_path, capsys):
    partial = tmp_path / "kafka-broker-dddd.9.partial"
    partial.write_bytes(b"half")
    assert jvm.finish_archive(partial, tmp_path / "kafka-broker-dddd.jsa", "the Kafka broker", 1, False, 0.0) is None
    assert list(tmp_path.iterdir()) == []
    assert "No class archive for the Kafka broker (the run that writes it exited 1)" in capsys.readouterr().err
