"""What a node offers TorchServe: the torchserve and torch-model-archiver this interpreter imports, and the Java its
launcher starts the frontend with (`$JAVA_HOME/bin/java`, else `java` on PATH, as `ts.model_server` picks it).
Probed on the node itself (`serving.probe.describe_node`): `java -version` once."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import ClassVar

JAVA_PROBE_TIMEOUT_S = 30.0
INSTALL = "pip install torchserve==0.12.0 torch-model-archiver==0.12.0"


def java_executable() -> str | None:
    """The java TorchServe's launcher would run; None when there is none."""
    java_home = os.environ.get("JAVA_HOME")
    return shutil.which(f"{java_home}/bin/java" if java_home else "java")


@dataclass(frozen=True)
class TorchServeFacts:
    """The defaults mean: not probed (TorchServe is then trusted to be there)."""

    KEY: ClassVar[str] = "torchserve"

    version: str = ""  # torchserve
    archiver_version: str = ""  # torch-model-archiver
    java_version: str = ""
    java_path: str = ""
    problem: str | None = None  # why TorchServe cannot start here

    @classmethod
    def probe(cls) -> TorchServeFacts:
        versions, missing = {}, []
        for package in ("torchserve", "torch-model-archiver"):
            try:
                versions[package] = version(package)
            except PackageNotFoundError:
                missing.append(package)
        java = java_executable()
        java_version, problem = "", None
        if java is None:
            where = f"$JAVA_HOME/bin/java ({os.environ['JAVA_HOME']})" if os.environ.get("JAVA_HOME") else "on PATH"
            problem = (f"no java {where}: TorchServe's frontend is a Java program (install a JDK, e.g. openjdk-17) "
                       "(docs/troubleshooting.md#no-java-for-torchserve)")
        else:
            java_version, problem = _java_version(java)
        if missing:
            problem = f"{', '.join(missing)} not installed ({INSTALL})" + (f"; {problem}" if problem else "")
        return cls(versions.get("torchserve", ""), versions.get("torch-model-archiver", ""), java_version,
                   java or "", problem)


def _java_version(java: str) -> tuple[str, str | None]:
    """`java -version`'s version (e.g. 17.0.15), or why it would not say."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=JAVA_PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "", f"{java} -version failed: {exc}"
    output = done.stderr + done.stdout
    match = re.search(r'version "([^"]+)"', output)
    if done.returncode != 0 or match is None:
        return "", f"{java} -version failed (exit {done.returncode}): {output.strip()[:300]}"
    return match[1], None
