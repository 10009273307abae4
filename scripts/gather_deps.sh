#!/usr/bin/env bash
# Copies the source/header-only forms of lightwave's C++ test and logging dependencies from
# this machine's Debian packages into a folder (default .deps/), for a machine that cannot
# install packages: configure there with -DLW_DEPS_DIR=<folder>.
set -euo pipefail
dest=${1:-.deps}
for f in /usr/src/googletest/CMakeLists.txt /usr/include/spdlog/spdlog.h /usr/include/fmt/format.h /usr/include/CLI/CLI.hpp /usr/include/nlohmann/json.hpp; do
  [[ -e $f ]] || { echo "gather_deps: $f missing; run scripts/setup.sh first" >&2; exit 1; }
done
rm -rf "$dest"
mkdir -p "$dest/include"
cp -r /usr/src/googletest "$dest/googletest"
cp -r /usr/include/spdlog /usr/include/fmt /usr/include/CLI /usr/include/nlohmann "$dest/include/"
echo "gather_deps: wrote $(du -sh "$dest" | cut -f1) to $dest"
