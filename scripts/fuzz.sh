#!/usr/bin/env bash
# Builds a libFuzzer harness of tests/fuzz (clang with AddressSanitizer and UBSan, in build/fuzz
# with -DLW_FUZZ=ON) and runs it for SECONDS over its seed corpus and what earlier runs found
# (build/fuzz/corpus-HARNESS):
#   request   (default) a request body through the parser and the chat templates; seeds:
#             tests/fuzz/corpus/request (real requests). CI runs this one.
#   template  a chat template's source through the lexer, parser and evaluator; seeds: the
#             templates of tests/text/data. Templates are programs: a run can report a template
#             that loops for long (a timeout) without a fault in the interpreter.
#     scripts/fuzz.sh [SECONDS] [request|template]     default 60 request
# Exits non-zero when the harness crashes or finds a broken invariant; the input that did it is
# saved under build/fuzz/crashes/ (replay: build/fuzz/tests/fuzz/fuzz_HARNESS FILE).
# Environment: LW_FUZZ_CC / LW_FUZZ_CXX (default clang-14 / clang++-14), CCACHE_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60} harness=${2:-request}
[[ $seconds =~ ^[0-9]+$ && $harness =~ ^(request|template)$ ]] || { echo "usage: scripts/fuzz.sh [SECONDS] [request|template]"; exit 2; }
seeds=tests/fuzz/corpus/request dict=(-dict=tests/fuzz/request.dict)
[[ $harness == template ]] && seeds=tests/text/data dict=()
cc=${LW_FUZZ_CC:-clang-14} cxx=${LW_FUZZ_CXX:-clang++-14}
command -v "$cxx" > /dev/null || { echo "$cxx not found: install clang-14 and libclang-rt-14-dev (scripts/setup.sh)"; exit 1; }
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache} CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=1
mkdir -p build
cmake -S . -B build/fuzz -G Ninja -DLW_FUZZ=ON -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo > build/fuzz.configure.log 2>&1 || { cat build/fuzz.configure.log; exit 1; }
cmake --build build/fuzz --target "fuzz_$harness"
mkdir -p "build/fuzz/corpus-$harness" build/fuzz/crashes
# Leaks are not crashes of a request: the harness's fixture lives for the process.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
  "build/fuzz/tests/fuzz/fuzz_$harness" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
  ${dict[@]+"${dict[@]}"} -artifact_prefix=build/fuzz/crashes/ -print_final_stats=1 \
  "build/fuzz/corpus-$harness" "$seeds"
