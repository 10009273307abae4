#!/usr/bin/env bash
# Runs lightwave's test suite on this machine:
#   host32, host64  build the host target (SIMT emulator) at warp 32 and 64 and run ctest,
#                   with the wave-portability sanitizer on; the end-to-end runs of the default
#                   model (SmolLM2: the server, the model and engine runs) only at warp 64, and
#                   the benchmarks (bench/) compiled there (and for CUDA) only;
#   asan32, asan64  under AddressSanitizer (out-of-bounds device memory in kernels): at warp 32
#                   every library layer and its tests (LW_BUILD_SCOPE=engine), at warp 64 the
#                   kernels and ops and their tests (LW_BUILD_SCOPE=kernels);
#   wmma32          RDNA3's (gfx1100) matrix-fragment layout on the emulator at warp 32
#                   (LW_SIMT_MATRIX_LAYOUT_WMMA): the tests of the kernels on the layer (its
#                   primitives and planted bugs, attention, the int4 GEMM, the GGUF GEMVs);
#   cuda            build the CUDA target for sm_90 (nvcc) and run its ctest when a GPU is
#                   visible; otherwise compile and link the library, the command, the tests'
#                   device code, test_primitives and test_vendor only;
#   hip             build the HIP target for gfx90a, gfx942 and gfx1100 inside the ROCm 7
#                   toolchain root (scripts/rocm_root.sh makes it once, needs root, in the
#                   background from the start of the run): the library, the command, the tests'
#                   device code, test_primitives and test_vendor, and the wheel (setup.py bdist_wheel);
#                   compile and link only;
#   python          the Python package: the module in build/host32 under pytest (tests/python:
#                   the API against the CLI on SmolLM2, streaming, errors), then the wheel
#                   (`pip wheel .`, `python setup.py bdist_wheel`) installed into a fresh venv;
#   fuzz            the libFuzzer harness of the request parser and chat templates (clang,
#                   AddressSanitizer, UBSan; scripts/fuzz.sh) for 60 s: fails on any crash.
#                   Run beside the python step where both are asked for (its seconds overlap).
# Options: --only STEP[,STEP...]  run just those steps.   Logs: build/logs/<step>.log
# Environment: LW_ROCM_ROOT (default /var/cache/lightwave/rocm-root), CCACHE_DIR.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
steps=(host32 host64 asan32 asan64 wmma32 cuda hip python fuzz)
if [[ ${1:-} == --only ]]; then IFS=, read -ra steps <<< "${2:?--only needs a list of steps}"; fi
jobs=$(nproc)
rocm_root=${LW_ROCM_ROOT:-/var/cache/lightwave/rocm-root}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# Paths relative to the repository and no working directory in the hash: build folders at the
# same depth (build/host32, the wheel's build/wheel-*) and clones elsewhere share objects.
export CCACHE_BASEDIR=$repo CCACHE_NOHASHDIR=1
# One name for the host compiler in every build: the test builds' CMake finds `c++`, the wheel's
# isolated CMake `g++` (the same binary), and ccache keys objects on the compiler's name too.
export CC=${CC:-cc} CXX=${CXX:-c++}
mkdir -p build/logs "$CCACHE_DIR"
[[ -d /usr/local/cuda/bin ]] && export PATH=/usr/local/cuda/bin:$PATH
# OpenBLAS's Haswell kernels and one thread whatever the machine, as ctest's runs get them
# (tests/CMakeLists.txt: its kernels, blocking and row split between threads, and so the host
# target's fp32 sums, differ between machines; SmolLM2's bf16 answer to a bare "What is the
# capital of France?" is Paris at two threads and French prose at one). One thread also stops its
# idle workers spinning (sched_yield) between calls: the SmolLM2 server and model tests took 299
# CPU s at two threads, 227 at one.
export OPENBLAS_CORETYPE=Haswell OPENBLAS_NUM_THREADS=1

# The ROCm toolchain root is mostly downloads: made in the background while the host steps
# compile (a no-op when a previous run left it).
rocm_pid=
if [[ " ${steps[*]} " == *" hip "* ]]; then
  scripts/rocm_root.sh "$rocm_root" > build/logs/rocm_root.log 2>&1 &
  rocm_pid=$!
fi

# The reference Python packages (Hugging Face tokenizers, gguf, safetensors) in a venv.
test_python=$(scripts/python_env.sh) || { echo "scripts/python_env.sh failed"; exit 1; }

# The default model (SmolLM2-135M-Instruct GGUF), for the model tests.
smollm2=$(scripts/fetch_model.sh) || { echo "scripts/fetch_model.sh failed"; exit 1; }

declare -A result seconds
summaries=()

run_step() {  # run_step NAME COMMAND...
  local name=$1; shift
  local log=build/logs/$name.log t0=$SECONDS
  echo "== $name"
  if "$@" > "$log" 2>&1; then
    result[$name]=pass
  else
    result[$name]=FAIL
    # What failed, from anywhere in the log (a failing test's own output comes long before the
    # summary): gtest failures, the server checks' FAIL lines, Python assertions.
    grep -E -A3 "^\[  FAILED  \]|: Failure$|^FAIL |^E  +|Error|error:" "$log" | head -80
    tail -40 "$log"
  fi
  seconds[$name]=$((SECONDS - t0))
}

# The runs of the default model (SmolLM2 on the emulator: the server, the model's answers, the
# GGUF config, the 10-request engine test) take minutes each; they run in one step, host64 (and
# the python step runs the module on it at warp 32). Under AddressSanitizer the emulator runs
# several times slower than without (the instrumented kernels and allocator), so the
# statistical sampling test (800 blocks of 1024 threads; 146 s under it at warp 32, 25 s
# without), the tiny model's many-request engine tests (32 requests; one request among up to
# 24 others: 60 and 77 s) and the tensor-parallel runs of random quantised experts (50 s) are
# left to the plain builds too. ASan still covers the engine's code (prefix cache, preemption,
# cancellation, stop strings, refusals, mostly in deterministic mode), the loader's sharding of
# quantised checkpoints (the GGUF, 8-bit and random quantised weights' tensor-parallel tests)
# and every kernel in the op tests.
smollm2_runs="server\.openai_client|server\.soak|server\.connections|model\.smollm2|SmolLM2"
# The long-prompt prefill and the 8-bit cache attention tests run under it at warp 64 (asan64)
# and under the wave sanitizer at warp 32 (host32).
asan32_exclude="PrefillAttention.LongPromptWholeAndChunked|KvCache8Bit.AttentionReadsTheCodesTimesTheirScales"
asan_exclude="$smollm2_runs|Sampling.FrequenciesFollowTheFilteredDistribution|Engine.ConcurrentRequestsMatchEachAlone|Engine.DeterministicRequestIsTheSameInAnyBatch|TensorParallel.RandomQuantisedExpertsMatchTheirExpansion"

host_step() {  # host_step NAME WARP EXCLUDE [CMAKE_ARG...]
  local dir=build/$1 warp=$2 exclude=$3
  shift 3
  cmake -S . -B "$dir" -G Ninja -DLW_GPU=host -DLW_WARP_SIZE="$warp" -DLW_TEST_PYTHON="$test_python" -DLW_SMOLLM2_GGUF="$smollm2" "$@" &&
    cmake --build "$dir" -j"$jobs" &&
    ctest --test-dir "$dir" -j"$jobs" --output-on-failure ${exclude:+-E "$exclude"}
}

# The other layouts run in host32 (NVIDIA's) and host64 (MFMA's); this one in a tree of its own.
wmma_tests="Primitives|PlantedBugs|Attention|KvCache|Int4Weights|GgufLinear"
wmma_step() {
  local dir=build/wmma32
  cmake -S . -B "$dir" -G Ninja -DLW_GPU=host -DLW_WARP_SIZE=32 -DLW_TEST_PYTHON="$test_python" -DLW_SMOLLM2_GGUF="$smollm2" \
    -DLW_BUILD_SCOPE=engine -DLW_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS=-DLW_SIMT_MATRIX_LAYOUT_WMMA &&
    cmake --build "$dir" -j"$jobs" --target test_primitives test_sanitizer test_attention test_int4_weights test_gguf_linear &&
    ctest --test-dir "$dir" -j"$jobs" --output-on-failure -R "$wmma_tests"
}

cuda_step() {
  command -v nvcc > /dev/null || { echo "nvcc not found: install the CUDA toolkit"; return 1; }
  cmake -S . -B build/cuda -G Ninja -DLW_GPU=cuda -DCMAKE_CUDA_ARCHITECTURES=90 -DLW_TEST_PYTHON="$test_python" -DLW_SMOLLM2_GGUF="$smollm2" || return 1
  if nvidia-smi -L 2> /dev/null | grep -q "GPU 0"; then
    cmake --build build/cuda -j"$jobs" && ctest --test-dir build/cuda -j4 --output-on-failure
  else
    # Without a GPU: every device source (the library's kernels, the tests' kernels and vendor
    # shims, bench_read), the command and two test programs linked against them. The other test
    # programs and the benchmarks are host sources the host steps compile; no machine here would
    # run them.
    cmake --build build/cuda -j"$jobs" --target lightwave lw_test_kernels test_primitives test_vendor bench_read &&
      echo "no NVIDIA GPU visible: the CUDA target was compiled and linked, not run"
  fi
}

hip_step() {
  if [[ -n $rocm_pid ]] && ! wait "$rocm_pid"; then cat build/logs/rocm_root.log; return 1; fi
  scripts/rocm_root.sh "$rocm_root" || return 1
  scripts/rocm_root.sh "$rocm_root" --exec "$repo" -- bash -c '
    set -e
    # The Python module and the ROCm wheel need these in the root (added once).
    pkgs="python3-dev pybind11-dev python3-scikit-build-core"
    if ! dpkg -s $pkgs > /dev/null 2>&1; then
      apt-get -o Acquire::Check-Valid-Until=false update -q
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $pkgs
    fi
    # The ROCm clang++ compiles the host .cpp files too: hip_bf16.h needs clang builtins.
    hipcxx=$(sed -n "s/^set(CMAKE_HIP_COMPILER \"\([^\"]*\)\".*/\1/p" /etc/lightwave-rocm.cmake)
    cmake -C /etc/lightwave-rocm.cmake -S /src -B /src/build/hip -G Ninja -DLW_GPU=hip \
      -DCMAKE_CXX_COMPILER="$hipcxx" -DCMAKE_HIP_ARCHITECTURES="gfx90a;gfx942;gfx1100" -DLW_BUILD_BENCH=OFF
    # The library and the command, the device code of the tests and one test program linked
    # against them: the other test programs are sources of the host builds, which no machine
    # runs here.
    cmake --build /src/build/hip -j'"$jobs"' --target lightwave lw_test_kernels test_primitives test_vendor
    echo "HIP target compiled and linked for gfx90a, gfx942 and gfx1100:"
    ls -l /src/build/hip/src/app/lightwave /src/build/hip/tests/test_primitives
    # The ROCm wheel as `python setup.py bdist_wheel` makes it (its objects come from ccache).
    rm -rf /src/build/dist-hip
    TESTING=0 CMAKE_BUILD_PARALLEL_LEVEL='"$jobs"' \
      CMAKE_ARGS="-C /etc/lightwave-rocm.cmake -DLW_GPU=hip -DCMAKE_CXX_COMPILER=$hipcxx -DCMAKE_HIP_ARCHITECTURES=gfx90a;gfx942;gfx1100" \
      python3 setup.py bdist_wheel -d /src/build/dist-hip
    echo "HIP wheel compiled and linked:"
    ls -l /src/build/dist-hip'
}

python_step() {
  cmake -S . -B build/host32 -G Ninja -DLW_GPU=host -DLW_WARP_SIZE=32 -DLW_TEST_PYTHON="$test_python" \
    -DLW_SMOLLM2_GGUF="$smollm2" -DLW_BUILD_PYTHON=ON &&
    cmake --build build/host32 -j"$jobs" --target lightwave_python &&
    LW_PYTHON_PATH="$repo/build/host32/python" LW_SMOLLM2_GGUF="$smollm2" LW_TEST_WHEEL=1 \
      "$test_python" -m pytest -v -rP --durations=0 -p no:cacheprovider tests/python
}

# The fuzz run (60 s on one core, after a short build) goes beside the python step, whose pytest
# keeps one core busy: started with python where both are in the list, waited for as its own.
fuzz_pid= fuzz_done=
fuzz_beside_python() {
  [[ " ${steps[*]} " == *" fuzz "* && -z $fuzz_done ]] || return 0
  (
    t0=$SECONDS
    scripts/fuzz.sh 60 > build/logs/fuzz.log 2>&1
    echo "$? $((SECONDS - t0))" > build/logs/fuzz.status
  ) &
  fuzz_pid=$!
}
fuzz_step() {
  fuzz_done=1
  if [[ -z $fuzz_pid ]]; then run_step fuzz scripts/fuzz.sh 60; return; fi
  echo "== fuzz (beside python)"
  wait "$fuzz_pid"
  local status took
  read -r status took < build/logs/fuzz.status || status=1
  seconds[fuzz]=${took:-0}
  if [[ $status == 0 ]]; then
    result[fuzz]=pass
  else
    result[fuzz]=FAIL
    tail -40 build/logs/fuzz.log
  fi
}

for s in "${steps[@]}"; do
  case $s in
    host32) run_step host32 host_step host32 32 "$smollm2_runs" -DLW_BUILD_BENCH=OFF ;;
    host64) run_step host64 host_step host64 64 "" ;;
    asan32) run_step asan32 host_step asan32 32 "$asan_exclude|$asan32_exclude" -DLW_SANITIZE_ADDRESS=ON -DLW_BUILD_SCOPE=engine ;;
    asan64) run_step asan64 host_step asan64 64 "$asan_exclude" -DLW_SANITIZE_ADDRESS=ON -DLW_BUILD_SCOPE=kernels ;;
    wmma32) run_step wmma32 wmma_step ;;
    cuda) run_step cuda cuda_step ;;
    hip) run_step hip hip_step ;;
    python) fuzz_beside_python; run_step python python_step ;;
    fuzz) fuzz_step ;;
    *) echo "unknown step '$s' (host32, host64, asan32, asan64, wmma32, cuda, hip, python, fuzz)"; exit 2 ;;
  esac
  if [[ $s == host* || $s == asan* || $s == wmma* || $s == cuda ]]; then
    line=$(grep -E "tests passed|tests failed|compiled and linked, not run" "build/logs/$s.log" | tail -1)
    summaries+=("$s: ${line:-no test summary (see build/logs/$s.log)}")
  elif [[ $s == hip ]]; then
    line=$(grep -E "compiled and linked for" "build/logs/$s.log" | tail -1)
    summaries+=("$s: ${line:-build failed (see build/logs/$s.log)}")
  elif [[ $s == fuzz ]]; then
    line=$(grep -E "^Done [0-9]+ runs in" "build/logs/$s.log" | tail -1)
    summaries+=("$s: ${line:-no libFuzzer summary (see build/logs/$s.log)}")
  elif [[ $s == python ]]; then
    line=$(grep -E "^=+ .*(passed|failed|error).* in [0-9.]+s" "build/logs/$s.log" | tail -1 | tr -d =)
    summaries+=("$s: ${line:-no pytest summary (see build/logs/$s.log)}")
  fi
done

echo
echo "step      result   seconds"
status=0
for s in "${steps[@]}"; do
  printf '%-9s %-8s %7s\n' "$s" "${result[$s]}" "${seconds[$s]}"
  [[ ${result[$s]} == pass ]] || status=1
done
printf '%s\n' "${summaries[@]}"
echo "lightwave tests: $([[ $status == 0 ]] && echo PASSED || echo FAILED)"
exit $status
