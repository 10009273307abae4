"""The wheel: `pip wheel .` (an isolated build, as `pip install .` does) and
`python setup.py bdist_wheel` build it; it installs into a fresh virtual environment, imports,
and brings the `lightwave` command. Slow (a CMake build of the engine): runs when
LW_TEST_WHEEL=1 (scripts/test.sh --only python sets it). ccache serves the objects of the
test builds when CCACHE_BASEDIR is the repository (scripts/test.sh sets it).
"""

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.environ.get("LW_TEST_WHEEL") != "1", reason="set LW_TEST_WHEEL=1 to build the wheel")


def run(*cmd, **kw):
    print("$", " ".join(map(str, cmd)), flush=True)
    t0 = time.time()
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    print(f"  {time.time() - t0:.0f} s", flush=True)
    if out.returncode != 0:
        pytest.fail(f"exit status {out.returncode}\n{out.stdout[-6000:]}\n{out.stderr[-6000:]}")
    return out


def the_wheel(folder: Path) -> Path:
    (wheel,) = folder.glob("lightwave-*.whl")
    return wheel


def check_contents(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    for f in ("lightwave/__init__.py", "lightwave/_lightwave.pyi", "lightwave/py.typed", "lightwave/bin/lightwave"):
        assert f in names, f
    assert any(n.startswith("lightwave/_lightwave.") and n.endswith(".so") for n in names)
    # Only the package and its metadata: none of the C++ install rules' headers or libraries.
    assert all(n.startswith(("lightwave/", "lightwave-")) for n in names), names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "lightwave = lightwave.__main__:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    return names


def test_pip_wheel_installs_into_a_fresh_venv(tmp_path):
    run(sys.executable, "-m", "pip", "wheel", REPO, "--no-deps", "-w", tmp_path / "dist", cwd=REPO)
    wheel = the_wheel(tmp_path / "dist")
    check_contents(wheel)

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    run(venv / "bin" / "python", "-m", "pip", "install", "-q", wheel)
    # From a folder outside the repository: the installed package, not the sources.
    out = run(venv / "bin" / "python", "-c", "import lightwave; print(lightwave.__version__, lightwave.build_target)", cwd=tmp_path)
    version, target = out.stdout.split()
    assert version == wheel.name.split("-")[1]
    out = run(venv / "bin" / "python", "-c",
              "import lightwave\ntry:\n  lightwave.LLM('/no/such/model.gguf')\nexcept lightwave.LightwaveError as e:\n  print(e)",
              cwd=tmp_path)
    assert "/no/such/model.gguf" in out.stdout
    info = run(venv / "bin" / "lightwave", "info", cwd=tmp_path)
    assert f"lightwave {version}" in info.stdout and target in info.stdout


def test_setup_py_bdist_wheel(tmp_path):
    run(sys.executable, "setup.py", "bdist_wheel", "-d", tmp_path / "dist", cwd=REPO)
    check_contents(the_wheel(tmp_path / "dist"))
