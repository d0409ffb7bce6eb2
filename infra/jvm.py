"""What the JVM parts need from the machine: Java 17+, and clear words when it is missing."""
from __future__ import annotations

import re
import shutil
import subprocess

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
