"""Bad set-ups get one clear sentence and a non-zero exit, never a traceback.

Each case runs the real command (`python -m infra.broker up`, `python -m infra.jars`) in a
subprocess with the machine made wrong in one way: no Java, an old Java, the port taken, no
Maven, Maven Central out of reach, a half-written jar folder.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from infra.config import ROOT
from infra.jars import MANIFEST, ensure, is_complete


def run(args, tmp_path, path=None, **env):
    full = {**os.environ, "PYTHONPATH": str(ROOT), "CARDSTREAM_RUN_DIR": str(tmp_path / "run"), **env}
    if path is not None:
        full["PATH"] = path
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, env=full,
                          cwd=ROOT, timeout=300)


def one_clear_sentence(proc):
    assert proc.returncode != 0
    out = (proc.stdout + proc.stderr).strip()
    assert "Traceback" not in out, out
    return out.splitlines()[-1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bin_dir(tmp_path, **links):
    """A PATH folder holding only the given commands (name -> target or script text)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for name, target in links.items():
        dest = folder / name
        if target.startswith("#!"):
            dest.write_text(target)
            dest.chmod(0o755)
        else:
            dest.symlink_to(target)
    return str(folder)


def test_port_taken_by_another_program(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        proc = run(["infra.broker", "up"], tmp_path, KAFKA_PORT=str(port),
                   KAFKA_CONTROLLER_PORT=str(free_port()))
    line = one_clear_sentence(proc)
    assert f"Port {port}" in line and "taken by another program" in line


def test_no_java(tmp_path):
    proc = run(["infra.broker", "up"], tmp_path, path=bin_dir(tmp_path), KAFKA_PORT=str(free_port()),
               KAFKA_CONTROLLER_PORT=str(free_port()))
    assert "Java 17 is needed but `java` is not on the PATH" in one_clear_sentence(proc)


def test_old_java(tmp_path):
    old_java = '#!/bin/sh\necho \'openjdk version "11.0.22" 2024-01-16\' >&2\n'
    proc = run(["infra.broker", "up"], tmp_path, path=bin_dir(tmp_path, java=old_java),
               KAFKA_PORT=str(free_port()), KAFKA_CONTROLLER_PORT=str(free_port()))
    assert "Java 17 or newer is needed, but `java` is version 11" in one_clear_sentence(proc)


def test_no_maven(tmp_path):
    path = bin_dir(tmp_path, java=shutil.which("java"))
    proc = run(["infra.jars"], tmp_path, path=path, CARDSTREAM_JARS_DIR=str(tmp_path / "jars"))
    assert "Maven (`mvn`) is needed" in one_clear_sentence(proc)


def test_maven_central_unreachable(tmp_path):
    proxy = "-Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=9 -Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=9"
    proc = run(["infra.jars"], tmp_path, CARDSTREAM_JARS_DIR=str(tmp_path / "jars"),
               MAVEN_OPTS=f"-Dmaven.repo.local={tmp_path / 'm2'} {proxy}")
    assert "Maven Central could not be reached" in one_clear_sentence(proc)
    assert not (tmp_path / "jars" / "kafka").exists()  # nothing that looks usable was left behind


@pytest.mark.parametrize("damage", ["no manifest", "truncated jar"])
def test_half_written_jar_folder_is_fetched_again(tmp_path, settings, damage):
    good = settings.kafka_jars
    assert is_complete(good, "kafka"), "run `make setup` first"
    broken = tmp_path / "jars" / "kafka"
    shutil.copytree(good, broken)
    if damage == "no manifest":
        (broken / MANIFEST).unlink()
    else:
        victim = next(broken.glob("kafka-clients-*.jar"))
        victim.write_bytes(victim.read_bytes()[:1000])
    assert not is_complete(broken, "kafka")
    ensure("kafka", tmp_path / "jars")
    assert is_complete(broken, "kafka")
