"""The wheel ships the product and nothing of the repository's tooling: no fault harness, no
differential, no benchmarks, no local harness, no Java, C, Go or JavaScript sources;
``zabby.testing`` and its pytest plugin are in it, and (slow) a fresh virtual environment with
only the wheel installed runs a user's test file with them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLING = ("jepsen", "differential", "bench", "local", "harness")
SOURCES_OF_OTHER_LANGUAGES = (".java", ".c", ".js", ".go")
PIP_TIMEOUT_S = 600


def build_wheel(folder: Path) -> Path:
    """``pip wheel`` of a copy of the project (the checkout's own build/ and egg-info untouched),
    with this environment's setuptools (an isolated build environment costs 15 s more)."""
    project = folder / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(ROOT / "zabby", project / "zabby", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(folder / "dist"), str(project)],
                   check=True, capture_output=True, timeout=PIP_TIMEOUT_S)  # fmt: skip
    (wheel,) = (folder / "dist").glob("zabby-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_holds_the_product_only(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    files = [name for name in names if ".dist-info/" not in name]
    assert files and all(name.startswith("zabby/") for name in files), [n for n in files if not n.startswith("zabby/")]
    tooling = [name for name in files if set(Path(name).parts[:-1]) & set(TOOLING)]
    assert not tooling, tooling
    foreign = [name for name in files if name.endswith(SOURCES_OF_OTHER_LANGUAGES)]
    assert not foreign, foreign
    for needed in ("zabby/testing/__init__.py", "zabby/testing/pytest_plugin.py", "zabby/server/adminport/console.html", "zabby/py.typed"):
        assert needed in files
    entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    text = archive.read(entry_points).decode()
    assert "[pytest11]" in text and "zabby.testing.pytest_plugin" in text
    assert "harness" not in text and "bench" not in text


@pytest.mark.slow
def test_a_fresh_environment_with_the_wheel_runs_a_users_test(wheel: Path, tmp_path: Path) -> None:
    """What a user does: install the wheel (and pytest) in a new virtualenv, and run
    examples/test_with_zabby_testing.py from a folder outside the checkout."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(wheel), "pytest"], check=True, capture_output=True, timeout=PIP_TIMEOUT_S)
    site = Path(subprocess.run([str(python), "-c", "import zabby, pathlib; print(pathlib.Path(zabby.__file__).parent.parent)"],
                               check=True, capture_output=True, text=True, timeout=60, cwd=tmp_path).stdout.strip())  # fmt: skip
    assert not (site / "harness").exists() and not list((site / "zabby").rglob("*.java"))
    user = tmp_path / "user"
    user.mkdir()
    shutil.copy(ROOT / "examples" / "test_with_zabby_testing.py", user)
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH" and not key.startswith("PYTEST_")}
    done = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_with_zabby_testing.py"],
                          capture_output=True, text=True, timeout=PIP_TIMEOUT_S, cwd=user, env=environment)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout, done.stdout[-2000:]
