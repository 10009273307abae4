#!/usr/bin/env python3
"""torch's figures for bench_gemm: F.linear (cuBLAS) on the same Llama-3-8B shapes, timed the
same way (CUDA events around one back-to-back call per weight set, median). Prints a table in
bench_gemm's format."""
import argparse
import math

import torch
import torch.nn.functional as F


def median_ms(fn, repeats, sets):
    for i in range(sets):
        fn(i)
    torch.cuda.synchronize()
    times = []
    for i in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for s in range(sets):
            fn(s)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / sets)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--ms", default="1,2,4,8,16,64,256,4096")
    a = ap.parse_args()
    dt = torch.bfloat16
    src = torch.empty(1 << 29, device="cuda", dtype=dt)
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda i: dst.copy_(src), a.repeats, 1)
    copy_gbs = 2 * src.numel() * 2 / (copy_ms * 1e6)
    del src, dst
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__} F.linear bf16; copy {copy_gbs:.0f} GB/s")
    print(f"{'M':>6} {'N':>7} {'K':>6}  {'path':<10} {'ms':>9} {'TFLOP/s':>8} {'W GB/s':>8} {'% copy':>7}")
    for n, k in [(4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096)]:
        wbytes = n * k * 2
        sets = max(2, math.ceil(256e6 / wbytes))
        w = [torch.rand(n, k, device="cuda", dtype=dt) * 2 - 1 for _ in range(sets)]
        for m in [int(v) for v in a.ms.split(",")]:
            x = torch.rand(m, k, device="cuda", dtype=dt) * 2 - 1
            t = median_ms(lambda i: F.linear(x, w[i]), a.repeats, sets)
            gbs = wbytes / (t * 1e6)
            print(f"{m:>6} {n:>7} {k:>6}  {'torch':<10} {t:9.4f} {2 * m * n * k / (t * 1e9):8.1f} {gbs:8.0f} {100 * gbs / copy_gbs:6.1f}%")
        del w


if __name__ == "__main__":
    main()
