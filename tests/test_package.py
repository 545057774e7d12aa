"""The wheel ships the product and nothing of the repository's tooling: no fault harness, no
differential, no benchmarks, no Java, C, Go or JavaScript sources; ``zabby.testing`` and its
pytest plugin are in it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLING = ("jepsen", "differential", "bench", "harness")
SOURCES_OF_OTHER_LANGUAGES = (".java", ".c", ".js", ".go")


def build_wheel(folder: Path) -> Path:
    """``pip wheel`` of a copy of the project (the checkout's own build/ and egg-info untouched)."""
    project = folder / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(ROOT / "zabby", project / "zabby", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(folder / "dist"), str(project)],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    (wheel,) = (folder / "dist").glob("zabby-*.whl")
    return wheel


def test_the_wheel_holds_the_product_only(tmp_path: Path) -> None:
    archive = zipfile.ZipFile(build_wheel(tmp_path))
    names = archive.namelist()
    files = [name for name in names if ".dist-info/" not in name]
    assert files and all(name.startswith("zabby/") for name in files), [n for n in files if not n.startswith("zabby/")]
    tooling = [name for name in files if set(Path(name).parts[:-1]) & set(TOOLING)]
    assert not tooling, tooling
    foreign = [name for name in files if name.endswith(SOURCES_OF_OTHER_LANGUAGES)]
    assert not foreign, foreign
    for needed in ("zabby/testing/__init__.py", "zabby/testing/pytest_plugin.py", "zabby/server/console.html", "zabby/py.typed"):
        assert needed in files
    entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    text = archive.read(entry_points).decode()
    assert "[pytest11]" in text and "zabby.testing.pytest_plugin" in text
    assert "harness" not in text and "bench" not in text
