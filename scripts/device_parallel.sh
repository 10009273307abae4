#!/usr/bin/env bash
# The tensor-parallel runs of a machine with two or more GPUs (the device tool's two-GPU kind):
# builds the CUDA target, runs the parallel, engine and model tests on the GPUs, compares
# tensor-parallel lightwave with Hugging Face transformers on every architecture (two ranks in
# one process, then two processes meeting over TCP), and benchmarks the Llama-3-8B shape at
# TP=1 and TP=2. Logs go to $OUT (or build/device-logs). Run from the repository root:
#     scripts/device_parallel.sh [--bench-only]
set -uo pipefail
out=${OUT:-build/device-logs}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PATH=/usr/local/cuda/bin:$PATH
lw=build/device/src/app/lightwave
if [[ ${1:-} != --bench-only ]]; then
  source scripts/device_env.sh
  deps=("${lw_device_cmake[@]}")
  nvidia-smi -L | tee "$out/gpu.txt"
  start=$(date +%s)
  cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DLW_BUILD_PYTHON=OFF \
    "${deps[@]}" > "$out/configure.log" 2>&1 &&
    cmake --build build/device -j"$(nproc)" > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
  echo "build: $(( $(date +%s) - start )) s"
  ctest --test-dir build/device -j2 --output-on-failure -R "TensorParallel|Rendezvous|Engine|Model\.|Embedding" \
    > "$out/ctest.log" 2>&1
  grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest.log" | head -20
  grep -E "TensorParallel|Rendezvous" "$out/ctest.log" | sed 's/  */ /g' | head -20
  python3 tools/compare_hf.py --lightwave "$lw" --tp 2 2>&1 | tee "$out/compare_tp2.txt"
  python3 tools/compare_hf.py --lightwave "$lw" --tp 2 --nnodes 2 --arch llama,mixtral,qwen2_moe 2>&1 |
    tee "$out/compare_tp2_2nodes.txt"
fi
for tp in 2 1; do
  "$lw" bench --shape llama3-8b --tp "$tp" --json "$out/bench_tp$tp.json" 2>&1 | grep -v "^\[" | tee "$out/bench_tp$tp.txt"
done
LW_CUDA_GRAPHS=0 "$lw" bench --shape llama3-8b --no-throughput 2>&1 | grep -v "^\[" | tee "$out/bench_tp1_eager.txt"
