#!/usr/bin/env bash
# Builds the libFuzzer harness of the request parser and chat templates (tests/fuzz, clang with
# AddressSanitizer and UBSan, in build/fuzz with -DLW_FUZZ=ON) and runs it for SECONDS over the
# seed corpus tests/fuzz/corpus/request and what earlier runs found (build/fuzz/corpus).
#     scripts/fuzz.sh [SECONDS]     default 60
# Exits non-zero when the harness crashes or finds a broken invariant; the input that did it is
# saved under build/fuzz/crashes/ (replay: build/fuzz/tests/fuzz/fuzz_request FILE).
# Environment: LW_FUZZ_CC / LW_FUZZ_CXX (default clang-14 / clang++-14), CCACHE_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: scripts/fuzz.sh [SECONDS]"; exit 2; }
cc=${LW_FUZZ_CC:-clang-14} cxx=${LW_FUZZ_CXX:-clang++-14}
command -v "$cxx" > /dev/null || { echo "$cxx not found: install clang-14 and libclang-rt-14-dev (scripts/setup.sh)"; exit 1; }
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache} CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=1
cmake -S . -B build/fuzz -G Ninja -DLW_FUZZ=ON -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo > build/fuzz.configure.log 2>&1 || { cat build/fuzz.configure.log; exit 1; }
cmake --build build/fuzz --target fuzz_request
mkdir -p build/fuzz/corpus build/fuzz/crashes
# Leaks are not crashes of a request: the harness's fixture lives for the process.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
  build/fuzz/tests/fuzz/fuzz_request -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
  -dict=tests/fuzz/request.dict -artifact_prefix=build/fuzz/crashes/ -print_final_stats=1 \
  build/fuzz/corpus tests/fuzz/corpus/request
