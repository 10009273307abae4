"""Fixtures of the Python package tests.

The package is imported from LW_PYTHON_PATH (default build/host32/python: the build tree's
package, made by `cmake --build build/host32 --target lightwave_python`). The model is
LW_SMOLLM2_GGUF, or what scripts/fetch_model.sh fetches.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE_PARENT = Path(os.environ.get("LW_PYTHON_PATH", REPO / "build" / "host32" / "python"))
sys.path.insert(0, str(PACKAGE_PARENT))

try:
    import lightwave  # noqa: E402
except ImportError as e:
    raise pytest.UsageError(
        f"cannot import lightwave from {PACKAGE_PARENT} ({e}); build it with "
        "`cmake --build build/host32 --target lightwave_python` or set LW_PYTHON_PATH"
    )


@pytest.fixture(scope="session")
def model() -> str:
    path = os.environ.get("LW_SMOLLM2_GGUF")
    if not path:
        path = subprocess.run([str(REPO / "scripts" / "fetch_model.sh")], check=True, capture_output=True, text=True).stdout.strip()
    assert Path(path).is_file(), f"model {path} not found"
    return path


@pytest.fixture(scope="session")
def cli() -> Path:
    exe = PACKAGE_PARENT / "lightwave" / "bin" / "lightwave"
    assert exe.exists(), f"{exe} missing: build the lightwave_python target"
    return exe


@pytest.fixture(scope="session")
def llm(model):
    # A small KV cache: the emulator's device memory is this machine's RAM.
    return lightwave.LLM(model, num_kv_blocks=256)


@pytest.fixture(scope="session")
def deterministic_llm(model):
    return lightwave.LLM(model, num_kv_blocks=256, deterministic=True)
