"""Fetch the JVM jars CardStream runs on: the Kafka broker, the Spark-Kafka connector and HDFS.

Three small jars are compiled here too, against PySpark's own jars: the local file system
without a process per file (infra/localfs), the fraud job's JVM scoring and live profiles
(pipelines/fraud/jvm) and the engine's (pipelines/engine/jvm: the contract's JSON field reader).

`python -m infra.jars` (run by `make setup`) is idempotent and quick when the jars are already
there. Each folder is filled under a temporary name and renamed only when complete, with a
manifest of what it holds, so an interrupted setup never leaves a folder that looks usable.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from infra.config import ROOT, load
from infra.jvm import require_java

INFRA = ROOT / "infra"
KINDS = ("kafka", "spark", "hadoop")
# the Java sources compiled into the Spark jar folder: {jar name: source root}
LOCAL_FS_JAR = "cardstream-local-fs.jar"
JAVA_JARS = {LOCAL_FS_JAR: INFRA / "localfs",
             "cardstream-live-profiles.jar": ROOT / "pipelines" / "fraud" / "jvm",
             "cardstream-engine.jar": ROOT / "pipelines" / "engine" / "jvm"}
OWN_JAR_PREFIX = "cardstream-"  # every jar compiled here is named so; no fetched one is
assert all(name.startswith(OWN_JAR_PREFIX) for name in JAVA_JARS)
MANIFEST = ".complete.json"
NETWORK_SIGNS = ("No plugin found for prefix", "Unknown host", "transfer failed", "Could not transfer", "Network is unreachable",
                 "Connection refused", "Connect to", "timed out", "UnknownHostException")


def _fingerprint(kind: str) -> str:
    digest = hashlib.sha256((INFRA / kind / "pom.xml").read_bytes())
    if kind == "spark":
        for root in JAVA_JARS.values():
            for src in sorted(root.rglob("*.java")):
                digest.update(src.read_bytes())
    return digest.hexdigest()


def _pom_fingerprint(kind: str) -> str:
    return hashlib.sha256((INFRA / kind / "pom.xml").read_bytes()).hexdigest()


def _rebuild_java(target: Path) -> bool:
    """Only the Java sources changed since `target` was filled (same pom, every fetched jar there):
    compile the project's jars again and swap each in by rename (a running JVM keeps the file it
    opened), then the manifest, without fetching anything or emptying the folder. False when
    the folder needs a full setup."""
    try:
        manifest = json.loads((target / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    fetched = [j for j in manifest.get("jars") or [] if not j.startswith(OWN_JAR_PREFIX)]
    if manifest.get("pom") != _pom_fingerprint("spark") or not fetched or not all(
            zipfile.is_zipfile(target / j) for j in fetched):
        return False
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        for name, root in JAVA_JARS.items():
            _build_jar(Path(tmp), name, root)
        for name in JAVA_JARS:
            os.replace(Path(tmp) / name, target / name)
    for gone in target.glob(f"{OWN_JAR_PREFIX}*.jar"):  # a jar of ours the sources no longer make
        if gone.name not in JAVA_JARS:
            gone.unlink()
    _write_manifest(target, "spark", sorted(p.name for p in target.glob("*.jar")))
    print(f"infra/jars: the project's Java jars rebuilt in {target}", file=sys.stderr)
    return True


def _write_manifest(folder: Path, kind: str, jars: list[str]) -> None:
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps({"fingerprint": _fingerprint(kind), "pom": _pom_fingerprint(kind), "jars": jars}))
    os.replace(tmp, folder / MANIFEST)


def is_complete(folder: Path, kind: str) -> bool:
    """True when `folder` holds every jar its manifest lists, each a readable zip, for this pom."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("fingerprint") != _fingerprint(kind):
        return False
    jars = manifest.get("jars") or []
    return bool(jars) and all(zipfile.is_zipfile(folder / jar) for jar in jars)


def _mvn(kind: str, out: Path) -> None:
    mvn = shutil.which("mvn")
    if not mvn:
        raise SystemExit("Maven (`mvn`) is needed to fetch the Kafka, Spark and HDFS jars but is not on "
                         "the PATH; install it (for example `apt-get install maven`).")
    cmd = [mvn, "-B", "-q", "-U", "-Dstyle.color=never", "-s", str(INFRA / "maven-settings.xml"), "-f",
           str(INFRA / kind / "pom.xml"), "dependency:copy-dependencies",
           f"-DoutputDirectory={out}", "-DincludeScope=runtime"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        text = proc.stdout + proc.stderr
        errors = [line for line in text.splitlines() if "ERROR" in line]
        first = re.sub(r"\x1b\[[0-9;]*m", "", errors[0] if errors else text.strip()[-300:])
        first = first.replace("[ERROR]", "").strip()
        if any(sign in text for sign in NETWORK_SIGNS):
            raise SystemExit(f"Maven Central could not be reached while fetching the {kind} jars; "
                             f"check the network (or a proxy in ~/.m2/settings.xml) and run "
                             f"`make setup` again. Maven said: {first[:300]}")
        raise SystemExit(f"Maven could not fetch the {kind} jars: {first[:400]}")


def _build_jar(out: Path, name: str, root: Path) -> None:
    """Compile the Java sources under `root` against PySpark's jars into `out`/`name`."""
    # deferred: pyspark (and its JVM) loads only where Spark runs
    import pyspark

    javac = shutil.which("javac")
    if not javac:
        raise SystemExit(f"`javac` (a JDK 17, not only a JRE) is needed to build {name}; "
                         "install openjdk-17-jdk-headless.")
    pyspark_jars = Path(pyspark.__file__).parent / "jars"
    sources = [str(p) for p in sorted(root.rglob("*.java"))]
    with tempfile.TemporaryDirectory() as classes:
        proc = subprocess.run([javac, "-nowarn", "--release", "17", "-d", classes, "-cp",
                               f"{pyspark_jars}/*:{out}/*", *sources],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"Compiling {name} failed: {proc.stderr.strip()[:400]}")
        with zipfile.ZipFile(out / name, "w", zipfile.ZIP_DEFLATED) as jar:
            for cls in Path(classes).rglob("*.class"):
                jar.write(cls, cls.relative_to(classes).as_posix())


def ensure(kind: str, jars_dir: Path) -> Path:
    target = jars_dir / kind
    if is_complete(target, kind):
        return target
    require_java()
    if kind == "spark" and target.exists() and _rebuild_java(target):
        return target
    if target.exists():
        print(f"infra/jars: {target.name}/ is incomplete or out of date (an interrupted or older "
              f"setup); fetching it again.", file=sys.stderr)
        shutil.rmtree(target)
    partial = jars_dir / f"{kind}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    print(f"infra/jars: fetching the {kind} jars from Maven Central ...", file=sys.stderr)
    _mvn(kind, partial)
    if kind == "spark":
        for name, root in JAVA_JARS.items():
            _build_jar(partial, name, root)
    jars = sorted(p.name for p in partial.glob("*.jar"))
    _write_manifest(partial, kind, jars)
    partial.rename(target)
    print(f"infra/jars: {len(jars)} {kind} jars ready in {target}", file=sys.stderr)
    return target


def main() -> None:
    settings = load()
    for kind in KINDS:
        ensure(kind, settings.jars_dir)


if __name__ == "__main__":
    main()
