#!/usr/bin/env bash
# On the GPU machine: builds the working tree into build/device and the "before" tree of
# scripts/ab_base.sh (this tree with .ab/base laid over it, .ab/removed deleted) into build/base,
# with every core, for A/B timings in one call. Then run each measurement with both builds,
# alternating, e.g.
#     scripts/device_ab.sh lightwave bench_attention && for b in build/device build/base build/device build/base; do
#       $b/src/app/lightwave bench --shape llama3-8b --requests 1 --no-throughput; done
# Targets: those named (default: lightwave and the benchmarks; a test target's ctest cases run
# from build/device as in device_test.sh); ARCH from LW_CUDA_ARCH (90).
set -euo pipefail
[[ -f .ab/rev ]] || { echo "device_ab: no .ab/ (run scripts/ab_base.sh REV here first and carry .ab)" >&2; exit 2; }
targets=("$@")
(( ${#targets[@]} )) || targets=(lightwave bench_ops bench_gemm bench_attention)
export PATH=/usr/local/cuda/bin:$PATH
out=${OUT:-build/device-logs}
mkdir -p "$out"
source scripts/device_env.sh
cfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${LW_CUDA_ARCH:-90}" -DLW_GPU=cuda
     "${lw_device_cmake[@]}")
rm -rf build/base-src
mkdir -p build/base-src
tar -c --exclude=./build --exclude=./.ab --exclude=./.git . | tar -x -C build/base-src
cp -r .ab/base/. build/base-src/
while IFS= read -r f; do [[ -n $f ]] && rm -f "build/base-src/$f"; done < .ab/removed
start=$(date +%s)
for tree in device base; do
  src=.
  [[ $tree == base ]] && src=build/base-src
  cmake -S "$src" -B "build/$tree" "${cfg[@]}" > "$out/configure-$tree.log" 2>&1 ||
    { tail -20 "$out/configure-$tree.log"; exit 1; }
  cmake --build "build/$tree" -j"$(nproc)" --target "${targets[@]}" > "$out/build-$tree.log" 2>&1 ||
    { grep -m5 -A5 error "$out/build-$tree.log"; exit 1; }
  echo "device_ab: build/$tree built ($(( $(date +%s) - start )) s)"
done
echo "device_ab: build/device is this tree, build/base is $(cat .ab/rev) for the files .ab names"
