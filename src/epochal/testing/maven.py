"""Jars of the servers tests start (the Kafka broker, ZooKeeper), resolved from Maven Central once.

:func:`resolved_jars` writes the given ``pom.xml`` to a temporary directory and runs ``mvn
dependency:copy-dependencies`` into ``target`` (``~/.cache/epochal/<name>`` unless the environment
variable ``override`` names another directory); a ``.complete`` marker makes later calls return
at once. Needs Java 17 and Maven on the PATH.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import tempfile


def resolved_jars(name: str, pom: str, override: str, what: str) -> pathlib.Path:
    """The directory of ``pom``'s runtime jars (``what`` names them in errors)."""
    given = os.environ.get(override)
    target = pathlib.Path(given) if given else pathlib.Path.home() / ".cache" / "epochal" / name
    if (target / ".complete").exists():
        return target
    if shutil.which("mvn") is None or shutil.which("java") is None:
        raise RuntimeError(f"the {what} needs Java 17 and Maven (mvn) on the PATH to fetch its jars")
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        path = pathlib.Path(work) / "pom.xml"
        path.write_text(pom)
        result = subprocess.run(["mvn", "-q", "-B", "-f", str(path), "dependency:copy-dependencies",
                                 f"-DoutputDirectory={target}", "-DincludeScope=runtime"],
                                capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"resolving the {what}'s jars from Maven Central failed:\n"
                           f"{result.stdout[-3000:]}{result.stderr[-3000:]}")
    (target / ".complete").write_text(name)
    return target
