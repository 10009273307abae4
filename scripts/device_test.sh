#!/usr/bin/env bash
# Builds the CUDA target on a GPU machine with all its cores and runs the test suite on the
# GPU; prints a short table at the end. Logs go to $OUT (the device tool's output folder) or
# build/device-logs. Run from the repository root:
#     scripts/device_test.sh [CUDA_ARCH] [--bench]   (default 90, the H100/H200)
# --bench also runs bench/bench_ops and bench/bench_gemm and, where torch is installed,
# bench/torch_reference.py and bench/torch_gemm.py on the same shapes, printing the tables.
# When the machine has no GoogleTest/spdlog packages, carry the folder made by
# scripts/gather_deps.sh as .deps/ and it is used (scripts/device_env.sh).
set -euo pipefail
arch=90
bench=0
for a in "$@"; do
  case $a in
    --bench) bench=1 ;;
    *) arch=$a ;;
  esac
done
out=${OUT:-build/device-logs}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PATH=/usr/local/cuda/bin:$PATH

source scripts/device_env.sh
deps=("${lw_device_cmake[@]}")
# The default model for the model tests, where the caller has it (scripts/fetch_model.sh).
[[ -n ${LW_SMOLLM2_GGUF:-} ]] && deps+=(-DLW_SMOLLM2_GGUF="$LW_SMOLLM2_GGUF")

nvidia-smi -L | tee "$out/gpu.txt"
# No LW_GPU: the build must detect the GPU and choose the cuda target by itself.
cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" "${deps[@]}" \
  2>&1 | tee "$out/configure.log"
grep -qE "detected target 'cuda'|lightwave: target cuda" "$out/configure.log" || { echo "device_test: target detection did not pick cuda" >&2; exit 1; }
start=$(date +%s)
cmake --build build/device -j"$(nproc)" 2>&1 | tee "$out/build.log" | tail -3
echo "build: $(( $(date +%s) - start )) s"
status=0
ctest --test-dir build/device -j4 --output-on-failure --output-junit "$out/junit.xml" > "$out/ctest.log" 2>&1 || status=$?
tail -5 "$out/ctest.log"
python3 tools/test_table.py "$out/junit.xml" || status=1
if (( bench )); then
  build/device/bench/bench_ops --json "$out/bench_ops.json" 2>&1 | tee "$out/bench_ops.txt"
  if python3 -c "import torch" 2> /dev/null; then
    python3 bench/torch_reference.py 2>&1 | tee "$out/torch_reference.txt"
  fi
  build/device/bench/bench_gemm --json "$out/bench_gemm.json" 2>&1 | tee "$out/bench_gemm.txt"
  if python3 -c "import torch" 2> /dev/null; then
    python3 bench/torch_gemm.py 2>&1 | tee "$out/torch_gemm.txt"
  fi
fi
exit $status
