#!/usr/bin/env bash
# Copies the source/header-only forms of lightwave's C++ test and logging dependencies, and
# the headers and static libraries of PCRE2 and ICU (the tokenizer's regular expressions and
# Unicode normalisation), and cpp-httplib (Debian builds it as a shared library: its header,
# the library and the Brotli libraries it needs besides OpenSSL and zlib, for `lightwave serve`),
# from this machine's Debian packages into a folder (default .deps/),
# for a machine that cannot install packages: configure there with -DLW_DEPS_DIR=<folder>.
set -euo pipefail
dest=${1:-.deps}
for f in /usr/src/googletest/CMakeLists.txt /usr/include/spdlog/spdlog.h /usr/include/fmt/format.h /usr/include/CLI/CLI.hpp /usr/include/nlohmann/json.hpp \
         /usr/include/pcre2.h /usr/include/unicode/unorm2.h /usr/include/httplib.h; do
  [[ -e $f ]] || { echo "gather_deps: $f missing; run scripts/setup.sh first" >&2; exit 1; }
done
rm -rf "$dest"
mkdir -p "$dest/include"
cp -r /usr/src/googletest "$dest/googletest"
cp -r /usr/include/spdlog /usr/include/fmt /usr/include/CLI /usr/include/nlohmann /usr/include/pcre2.h /usr/include/unicode "$dest/include/"
mkdir -p "$dest/lib"
lib=/usr/lib/$(gcc -print-multiarch)
cp "$lib/libpcre2-8.a" "$lib/libicuuc.a" "$lib/libicudata.a" "$dest/lib/"
cp /usr/include/httplib.h "$dest/include/"
cp -P "$lib"/libcpp-httplib.so* "$lib"/libbrotli{common,dec,enc}.so* "$dest/lib/"
# The reference Python packages the GPU machine lacks: gguf (pure Python; its dependencies are
# there) and ml_dtypes (FP8 values of the 8-bit weight fixtures), built for its Python 3.12.
python3 -m pip download -q --disable-pip-version-check --no-deps gguf -d "$dest/wheels"
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 ml_dtypes -d "$dest/wheels"
echo "gather_deps: wrote $(du -sh "$dest" | cut -f1) to $dest"
