# Sourced by the GPU-machine scripts (device_test.sh, device_ab.sh, device_parallel.sh) from the
# repository root: sets lw_device_cmake, the cmake arguments for what that machine lacks.
#  - LW_DEPS_DIR: GoogleTest, spdlog and PCRE2 from .deps/ (scripts/gather_deps.sh; carry it)
#    where the machine has no GoogleTest or PCRE2 packages;
#  - LW_TEST_PYTHON: the machine's python3 plus the wheels carried in .deps/wheels (installed
#    into build/device-py on PYTHONPATH: a venv would hide the machine's user-site packages,
#    torch and transformers among them).
mkdir -p build
lw_device_cmake=()
if [[ -d .deps ]] && { [[ ! -e /usr/include/gtest/gtest.h ]] || [[ ! -e /usr/include/pcre2.h ]]; }; then
  lw_device_cmake+=(-DLW_DEPS_DIR="$PWD/.deps")
fi
lw_device_python=$(command -v python3)
if [[ -d .deps/wheels ]]; then
  python3 -m pip install -q --no-index --no-deps --upgrade --target build/device-py .deps/wheels/*.whl
  printf '#!/bin/sh\nPYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} exec %s "$@"\n' "$PWD/build/device-py" "$lw_device_python" \
    > build/device-python
  chmod +x build/device-python
  lw_device_python=$PWD/build/device-python
fi
lw_device_cmake+=(-DLW_TEST_PYTHON="$lw_device_python")
