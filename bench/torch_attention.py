#!/usr/bin/env python3
"""The torch SDPA figures that bench_attention is compared with, measured the same way (CUDA
events, median), on the same shapes: causal prefill of one sequence (TFLOP/s) and decode of one
query token per sequence over a contiguous KV (GB/s of K and V). 32 query / 8 key-value heads of
128, bf16. Where FlashInfer is importable (../shared/docs/FACTS.md says how to carry it), its
paged kernels on the same shapes too (pages of 16 tokens, NHD): batch prefill (causal) and batch
decode with and without tensor cores. Prints a table in bench_attention's format."""
import argparse

import torch
import torch.nn.functional as F


def median_ms(fn, repeats):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


PAGE = 16


def paged_cache(seqs, ctx, kh, hd, dt):
    """A paged KV cache [pages, 2, PAGE, kv heads, head dim] with each sequence's pages in a
    shuffled order, and FlashInfer's CSR description of it."""
    per = (ctx + PAGE - 1) // PAGE
    kv = torch.randn(seqs * per, 2, PAGE, kh, hd, device="cuda", dtype=dt)
    indices = torch.randperm(seqs * per, device="cuda").int()
    indptr = torch.arange(0, seqs * per + 1, per, device="cuda").int()
    last = torch.full((seqs,), ctx - (per - 1) * PAGE, device="cuda", dtype=torch.int32)
    return kv, indptr, indices, last


def flashinfer_rows(a, copy_gbs, qh, kh, hd, dt):
    import flashinfer
    workspace = torch.empty(256 << 20, device="cuda", dtype=torch.uint8)
    name = f"fi-{flashinfer.__version__}"
    for n in [int(x) for x in a.prefill.split(",")]:
        kv, indptr, indices, last = paged_cache(1, n, kh, hd, dt)
        q = torch.randn(n, qh, hd, device="cuda", dtype=dt)
        w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")
        w.plan(torch.tensor([0, n], device="cuda", dtype=torch.int32), indptr, indices, last, qh, kh, hd, PAGE,
               causal=True, q_data_type=dt, kv_data_type=dt)
        ms = median_ms(lambda: w.run(q, kv), a.repeats)
        flops = 4.0 * n * n * hd * qh / 2
        print(f"{'prefill causal 1x' + str(n):24} {name:9} {ms:10.4f} {flops / (ms * 1e9):9.1f} {0:9.0f} {0:7.1f}%",
              flush=True)
    for seqs, ctx in a.decode:
        kv, indptr, indices, last = paged_cache(seqs, ctx, kh, hd, dt)
        q = torch.randn(seqs, qh, hd, device="cuda", dtype=dt)
        for tc in (False, True):
            w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=tc)
            w.plan(indptr, indices, last, qh, kh, hd, PAGE, q_data_type=dt, kv_data_type=dt)
            ms = median_ms(lambda: w.run(q, kv), a.repeats)
            gbs = 2 * seqs * ctx * kh * hd * 2 / (ms * 1e6)
            path = "fi-tc" if tc else "fi"
            print(f"{'decode ' + str(seqs) + 'x' + str(ctx):24} {path:9} {ms:10.4f} {0:9.1f} {gbs:9.0f} "
                  f"{100 * gbs / copy_gbs:7.1f}%", flush=True)


def decode_cases(text):
    """'1x4096,16x4096' -> [(1, 4096), (16, 4096)], as bench_attention's --decode."""
    cases = []
    for item in text.split(","):
        parts = item.split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"decode case '{item}': expected SEQUENCESxCONTEXT, both positive")
        cases.append((int(parts[0]), int(parts[1])))
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--prefill", default="512,2048,8192")
    ap.add_argument("--decode", type=decode_cases, default=decode_cases("1x4096,16x4096,64x640,128x2048"),
                    help="decode cases, SEQUENCESxCONTEXT")
    a = ap.parse_args()
    dt, qh, kh, hd = torch.bfloat16, 32, 8, 128
    src = torch.empty(1 << 29, device="cuda", dtype=dt)
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src), a.repeats)
    copy_gbs = 2 * src.numel() * 2 / (copy_ms * 1e6)
    del src, dst
    print(f"device {torch.cuda.get_device_name()}, bf16, torch {torch.__version__} SDPA; copy {copy_gbs:.0f} GB/s")
    print(f"{'case':24} {'path':9} {'ms':>10} {'TFLOP/s':>9} {'GB/s':>9} {'% copy':>8}")
    for n in [int(x) for x in a.prefill.split(",")]:
        q = torch.randn(1, qh, n, hd, device="cuda", dtype=dt)
        k = torch.randn(1, kh, n, hd, device="cuda", dtype=dt)
        v = torch.randn(1, kh, n, hd, device="cuda", dtype=dt)
        ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), a.repeats)
        flops = 4.0 * n * n * hd * qh / 2
        print(f"{'prefill causal 1x' + str(n):24} {'sdpa':9} {ms:10.4f} {flops / (ms * 1e9):9.1f} {0:9.0f} {0:7.1f}%")
    for seqs, ctx in a.decode:
        q = torch.randn(seqs, qh, 1, hd, device="cuda", dtype=dt)
        k = torch.randn(seqs, kh, ctx, hd, device="cuda", dtype=dt)
        v = torch.randn(seqs, kh, ctx, hd, device="cuda", dtype=dt)
        ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), a.repeats)
        gbs = 2 * seqs * ctx * kh * hd * 2 / (ms * 1e6)
        print(f"{'decode ' + str(seqs) + 'x' + str(ctx):24} {'sdpa':9} {ms:10.4f} {0:9.1f} {gbs:9.0f} {100 * gbs / copy_gbs:7.1f}%")
    del q, k, v
    try:
        flashinfer_rows(a, copy_gbs, qh, kh, hd, dt)
    except ImportError:
        print("flashinfer is not installed: no FlashInfer rows")


if __name__ == "__main__":
    main()
