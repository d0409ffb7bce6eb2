"""What the JVM parts need from the machine: Java 17+, and clear words when it is missing; and the
class archives (the JDK's class-data sharing) that start the broker and the Spark drivers sooner.

A JVM parses and verifies the same thousands of classes at every start: the broker, each job, each
standby and each restart. Mapped from an archive a first run wrote at its exit
(-XX:ArchiveClassesAtExit), a Spark session is up in 2.3 s instead of 4.0 s and the broker's port
opens in about half the time (bench/RESULTS.md#jvm-start). `make setup` writes them once per
checkout. An archive is named by a fingerprint of the JDK and of every jar on its class path, so a
rebuilt jar or another JDK never meets a stale one: it has none until the next `make setup` (and
the JVM itself refuses a stale archive, with a warning, and starts as before).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REQUIRED_JAVA = 17


def java_major() -> int:
    """The running `java`'s major version, or a one-sentence SystemExit when there is none."""
    java = shutil.which("java")
    if not java:
        raise SystemExit(
            f"Java {REQUIRED_JAVA} is needed but `java` is not on the PATH; install a JDK "
            f"{REQUIRED_JAVA} (for example `apt-get install openjdk-17-jdk-headless`)."
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise SystemExit(f"Could not read the Java version from `java -version`: {out.strip()[:200]}")
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 else major


def require_java() -> None:
    major = java_major()
    if major < REQUIRED_JAVA:
        raise SystemExit(
            f"Java {REQUIRED_JAVA} or newer is needed, but `java` is version {major}; install JDK "
            f"{REQUIRED_JAVA} and put it first on the PATH (or set JAVA_HOME)."
        )


def java_binary() -> Path | None:
    """The `java` that runs: JAVA_HOME's, else the one on the PATH (as spark-submit chooses)."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else (Path(w) if (w := shutil.which("java")) else None)
    return found.resolve() if found and found.exists() else None


def fingerprint(java: Path, jars: list[Path]) -> str:
    """What an archive was built from: the JDK binary and each jar's path, size and mtime."""
    digest = hashlib.sha256()
    for p in (java, *jars):
        st = p.stat()
        digest.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def class_archive(folder: Path, name: str, jars: list[Path]) -> Path | None:
    """Where the archive of a JVM running on `jars` is (or would be); None without a JDK or jars."""
    java = java_binary()
    if java is None or not jars:
        return None
    return folder / f"{name}-{fingerprint(java, sorted(jars))}.jsa"


def archive_options(path: Path | None, enabled: bool = True) -> list[str]:
    """The JVM option that maps an archive when it exists (and archives are on), else none."""
    return [f"-XX:SharedArchiveFile={path}"] if enabled and path is not None and path.exists() else []


def finish_archive(partial: Path, target: Path, what: str, exit_code: int | None, ok: bool, started: float,
                   detail: str = "") -> Path | None:
    """Puts a freshly written archive in place (renamed: never half a file) and drops the same
    JVM's archives of other jars or JDKs, which nothing maps again; or says in one sentence why
    there is none (`ok` false or nothing written), and that the JVM starts without one."""
    if not ok or not partial.exists():
        partial.unlink(missing_ok=True)
        print(f"No class archive for {what} (the run that writes it exited {exit_code}); it starts without one."
              + (f"\n{detail}" if detail else ""), file=sys.stderr)
        return None
    name = target.name.rsplit("-", 1)[0]
    for old in target.parent.glob(f"{name}-*.jsa"):
        if old != target:
            old.unlink(missing_ok=True)
    partial.rename(target)
    print(f"The class archive of {what} is ready ({time.monotonic() - started:.0f} s, "
          f"{target.stat().st_size >> 20} MB): {target}")
    return target
