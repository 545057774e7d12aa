"""Compile a Java tool at test time against Debian's jars (ZooKeeper's client, Curator), into
a cache folder keyed by the sources' and classpath's hash, so a second run starts at once.

Used by the benchmark's load generator, the differential Java client driver and the Curator
suite: each is one or a few ``.java`` files beside the Python that runs it."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

JAVA_DIR = Path("/usr/share/java")
JAVAC_TIMEOUT_S = 300
BUILT = ".built"  # the marker of a finished build


class JavaUnavailable(RuntimeError):
    """javac or a jar the tool needs is missing; the message says which and how to get it."""


def default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "zabby-java"


def classpath(*entries: Path) -> str:
    return ":".join(str(entry) for entry in entries)


def compile_java(name: str, sources: Sequence[Path], jars: Sequence[Path], cache: Path | None = None) -> Path:
    """The folder holding ``sources`` compiled against ``jars``; JavaUnavailable when it cannot
    be built here."""
    if not shutil.which("javac"):
        raise JavaUnavailable("no javac on PATH (apt-get install default-jdk-headless)")
    missing = [str(jar) for jar in jars if not jar.exists()]
    if missing:
        raise JavaUnavailable(f"missing jars: {', '.join(missing)}")
    digest = hashlib.sha256()
    for item in [*sources, *jars]:
        digest.update(str(item).encode())
        if item in sources:
            digest.update(item.read_bytes())
    build = (cache or default_cache()) / f"{name}-{digest.hexdigest()[:12]}"
    if (build / BUILT).exists():
        return build
    build.parent.mkdir(parents=True, exist_ok=True)
    # Compiled aside and renamed into place whole: parallel test workers may compile the same
    # tool at once, and none may load the classes another is still writing.
    scratch = Path(tempfile.mkdtemp(prefix=f".{build.name}-", dir=build.parent))
    try:
        argv = ["javac", "-nowarn", "-encoding", "UTF-8", "-d", str(scratch), "-cp", classpath(*jars), *map(str, sources)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=JAVAC_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"javac {name} failed:\n{done.stderr[-2000:]}")
        (scratch / BUILT).touch()
        shutil.rmtree(build, ignore_errors=True)  # a build left unfinished by an older, in-place compile
        with contextlib.suppress(OSError):  # ENOTEMPTY/EEXIST: another worker's build is in place, the same classes
            scratch.rename(build)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return build
